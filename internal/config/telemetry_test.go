package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseTracing(t *testing.T) {
	env := func(k string) (string, bool) {
		if k == "TEST_OTLP_KEY" {
			return "k-123", true
		}
		return "", false
	}
	half, zero, one := 0.5, 0.0, 1.0
	tests := []struct {
		name string
		doc  string
		want *Tracing
	}{
		{"absent", "", nil},
		{"empty", "telemetry: {tracing: {}}\n", &Tracing{}},
		{"all set", "telemetry:\n  tracing:\n    endpoint: http://collector:4318\n    protocol: HTTP/protobuf\n    sample_ratio: 0.5\n" +
			"    headers: {x-api-key: '${TEST_OTLP_KEY}'}\n    insecure: true\n    timeout: 3s\n    service_name: edge\n",
			&Tracing{Endpoint: "http://collector:4318", Protocol: "http/protobuf", SampleRatio: &half,
				Headers: map[string]string{"x-api-key": "k-123"}, Insecure: true, Timeout: 3 * time.Second, ServiceName: "edge"}},
		{"ratio zero is a value", "telemetry: {tracing: {sample_ratio: 0}}\n", &Tracing{SampleRatio: &zero}},
		{"ratio integer one", "telemetry: {tracing: {sample_ratio: 1}}\n", &Tracing{SampleRatio: &one}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", env)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(c.Telemetry.Tracing, tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func TestParseTracingErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"ratio above one", "telemetry: {tracing: {sample_ratio: 1.5}}\n", []string{"telemetry.tracing.sample_ratio: must be <= 1 (line 1)"}},
		{"ratio negative", "telemetry: {tracing: {sample_ratio: -0.1}}\n", []string{"telemetry.tracing.sample_ratio: must be >= 0 (line 1)"}},
		{"ratio string", "telemetry: {tracing: {sample_ratio: '0.5'}}\n", []string{"telemetry.tracing.sample_ratio: must be a number (line 1)"}},
		{"ratio nan", "telemetry: {tracing: {sample_ratio: .nan}}\n", []string{"telemetry.tracing.sample_ratio: must be a number (line 1)"}},
		{"protocol", "telemetry: {tracing: {protocol: thrift}}\n", []string{`telemetry.tracing.protocol: must be one of grpc, http/protobuf (got "thrift") (line 1)`}},
		{"endpoint scheme", "telemetry: {tracing: {endpoint: 'ftp://x'}}\n", []string{"telemetry.tracing.endpoint: must be host:port or an http(s):// URL (line 1)"}},
		{"timeout negative", "telemetry: {tracing: {timeout: -1s}}\n", []string{"telemetry.tracing.timeout: must be > 0 (line 1)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", nil)
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			var got []string
			for _, fe := range fieldErrors(t, err) {
				got = append(got, fe.Error())
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("errors (-got +want):\n%s", diff)
			}
		})
	}
}
