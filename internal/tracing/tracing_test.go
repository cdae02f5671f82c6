package tracing_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/tracing"
	"github.com/mcpgate/mcpgate/internal/tracing/tracetest"
)

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestEnabled(t *testing.T) {
	tests := []struct {
		name string
		c    *config.Tracing
		env  map[string]string
		want bool
	}{
		{"nothing", nil, nil, false},
		{"section", &config.Tracing{}, nil, true},
		{"endpoint variable", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"traces endpoint variable", nil, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"blank variable", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " "}, false},
		{"sdk disabled", &config.Tracing{}, map[string]string{"OTEL_SDK_DISABLED": "true"}, false},
		{"exporter none", &config.Tracing{}, map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tracing.Enabled(tt.c, envOf(tt.env)); got != tt.want {
				t.Errorf("Enabled = %v, want %v", got, tt.want)
			}
		})
	}
}

// Off, New builds nothing, and a nil Provider's methods are no-ops.
func TestNewOff(t *testing.T) {
	p, err := tracing.New(context.Background(), nil, tracing.Options{LookupEnv: envOf(nil)})
	if p != nil || err != nil {
		t.Fatalf("New = %v, %v; want nil, nil", p, err)
	}
	r, sp := p.StartHTTP(&http.Request{}, "/mcp")
	if sp != nil || r == nil {
		t.Errorf("StartHTTP off: span %v", sp)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// exportOne starts and ends one span through p and flushes it.
func exportOne(t *testing.T, p *tracing.Provider) {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", nil)
	_, sp := p.StartHTTP(r, "/mcp")
	tracing.EndHTTP(sp, 200)
	if err := p.ForceFlush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// Both OTLP transports reach a real receiver; the section's headers are
// sent with the variables', service name from the section beats
// OTEL_SERVICE_NAME, and the protocol can come from the environment.
func TestExportProtocols(t *testing.T) {
	t.Run("http/protobuf", func(t *testing.T) {
		rcv := tracetest.NewHTTP(t)
		p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint, Headers: map[string]string{"x-api-key": "k1"}, ServiceName: "edge"},
			tracing.Options{LookupEnv: envOf(map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=t%201", "OTEL_SERVICE_NAME": "ignored"})})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown(context.Background())
		exportOne(t, p)
		s := rcv.WaitFor(t, "a span", func(s []tracetest.Span) bool { return len(s) == 1 })
		if s[0].Service != "edge" || s[0].Name != "POST /mcp" {
			t.Errorf("span %+v", s[0])
		}
		if rcv.Header("x-api-key") != "k1" || rcv.Header("x-tenant") != "t 1" {
			t.Errorf("headers: x-api-key %q x-tenant %q", rcv.Header("x-api-key"), rcv.Header("x-tenant"))
		}
	})
	t.Run("grpc", func(t *testing.T) {
		// The exporter reads OTEL_EXPORTER_OTLP_* from the process itself.
		rcv := tracetest.NewGRPC(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+rcv.Endpoint)
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
		t.Setenv("OTEL_SERVICE_NAME", "from-env")
		p, err := tracing.New(context.Background(), nil, tracing.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown(context.Background())
		exportOne(t, p)
		s := rcv.WaitFor(t, "a span", func(s []tracetest.Span) bool { return len(s) == 1 })
		if s[0].Service != "from-env" {
			t.Errorf("service %q", s[0].Service)
		}
	})
	t.Run("grpc from config", func(t *testing.T) {
		rcv := tracetest.NewGRPC(t)
		p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint, Protocol: tracing.ProtocolGRPC, Insecure: true}, tracing.Options{LookupEnv: envOf(nil)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown(context.Background())
		exportOne(t, p)
		s := rcv.WaitFor(t, "a span", func(s []tracetest.Span) bool { return len(s) == 1 })
		if s[0].Service != tracing.DefaultServiceName {
			t.Errorf("service %q", s[0].Service)
		}
	})
	t.Run("unsupported protocol", func(t *testing.T) {
		_, err := tracing.New(context.Background(), nil, tracing.Options{LookupEnv: envOf(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})})
		if err == nil || !strings.Contains(err.Error(), "http/json") {
			t.Errorf("err %v", err)
		}
	})
}

// sample_ratio 0 records nothing started here, but a sampled traceparent
// header is honoured (parent-based).
func TestSampleRatio(t *testing.T) {
	rcv := tracetest.NewHTTP(t)
	zero := 0.0
	p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint, SampleRatio: &zero}, tracing.Options{LookupEnv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	exportOne(t, p)
	r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	_, sp := p.StartHTTP(r, "/mcp")
	tracing.EndHTTP(sp, 200)
	_ = p.ForceFlush(context.Background())
	s := rcv.WaitFor(t, "the sampled request", func(s []tracetest.Span) bool { return len(s) >= 1 })
	if len(s) != 1 || s[0].TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("spans %+v, want only the one with a sampled parent", s)
	}
}

func TestMetaLink(t *testing.T) {
	tests := []struct {
		name   string
		params string
		want   string // trace id, "" for no link
	}{
		{"none", `{"name":"x"}`, ""},
		{"empty", ``, ""},
		{"valid", `{"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=1"}}`, "0af7651916cd43dd8448eb211c80319c"},
		{"malformed", `{"_meta":{"traceparent":"00-zz-b7ad6b7169203331-01"}}`, ""},
		{"zero trace", `{"_meta":{"traceparent":"00-00000000000000000000000000000000-b7ad6b7169203331-01"}}`, ""},
		{"not a string", `{"_meta":{"traceparent":17}}`, ""},
		{"meta not an object", `{"_meta":"traceparent"}`, ""},
		{"in arguments only", `{"arguments":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok := tracing.MetaLink(json.RawMessage(tt.params))
			got := ""
			if ok {
				got = l.SpanContext.TraceID().String()
			}
			if got != tt.want {
				t.Errorf("link trace %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOutgoingParams(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	traced := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	const tp = `"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`
	tests := []struct {
		name   string
		ctx    context.Context
		params string
		want   string
	}{
		{"off untouched", context.Background(), `{"name":"a","_meta":{"traceparent":"x"}}`, `{"name":"a","_meta":{"traceparent":"x"}}`},
		{"off drops baggage", context.Background(), `{"_meta":{"baggage":"u=1","k":2}}`, `{"_meta":{"k":2}}`},
		{"off no params", context.Background(), ``, ``},
		{"on adds meta", traced, `{"name":"a"}`, `{"name":"a","_meta":{` + tp + `}}`},
		{"on no params", traced, ``, `{"_meta":{` + tp + `}}`},
		{"on replaces the client's", traced, `{"_meta":{"progressToken":"p","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"c=1","baggage":"u=1"}}`,
			`{"_meta":{"progressToken":"p",` + tp + `}}`},
		{"not an object", traced, `[1]`, `[1]`},
		// Decoders that match names case-insensitively (encoding/json into
		// a struct) read these as _meta, baggage and traceparent: every
		// spelling goes (found by FuzzMeta).
		{"off drops another spelling of _meta", context.Background(), `{"_metA":{"baggage":"u=1"},"_meta":{"k":2}}`, `{"_meta":{"k":2}}`},
		{"off drops Baggage and escaped baggage", context.Background(), `{"_meta":{"Baggage":"u=1","\u0062aggage":"v=2","k":2}}`, `{"_meta":{"k":2}}`},
		{"on replaces TraceParent", traced, `{"_meta":{"TraceParent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","TRACESTATE":"c=1"}}`, `{"_meta":{` + tp + `}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(tracing.OutgoingParams(tt.ctx, json.RawMessage(tt.params)))
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

// Off, the hooks the hot path calls allocate nothing.
func TestOffAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	params := json.RawMessage(`{"name":"a","arguments":{"x":1},"_meta":{"progressToken":"p"}}`)
	var p *tracing.Provider
	h := http.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		c, sp := tracing.StartClient(ctx, "s", "tools/call", params, "tcp")
		_ = tracing.OutgoingParams(c, params)
		tracing.InjectHeader(c, h)
		tracing.NoteServer(c, "s")
		tracing.NoteOutcome(c, tracing.OutcomeFault, "timeout")
		tracing.End(sp, nil, "")
		_, sp2 := tracing.StartInternal(c, "x", "s")
		tracing.End(sp2, nil, "")
		tracing.MessageSpan(c).Progress()
		_ = tracing.Detach(c)
		_, msp := p.StartMessage(c, nil)
		tracing.EndMessage(c, msp, nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run with tracing off, want 0", allocs)
	}
}

// A client-chosen value is bounded in an attribute.
func TestAttributeValueLimit(t *testing.T) {
	rcv := tracetest.NewHTTP(t)
	p, err := tracing.New(context.Background(), &config.Tracing{Endpoint: rcv.Endpoint}, tracing.Options{LookupEnv: envOf(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	r, _ := http.NewRequest(http.MethodPost, "http://gw/mcp", nil)
	r.Header.Set("User-Agent", strings.Repeat("u", 5000))
	_, sp := p.StartHTTP(r, "/mcp")
	tracing.EndHTTP(sp, 200)
	_ = p.ForceFlush(context.Background())
	s := rcv.WaitFor(t, "a span", func(s []tracetest.Span) bool { return len(s) == 1 })
	if n := len(s[0].Attrs["user_agent.original"]); n != tracing.DefaultAttributeValueLengthLimit {
		t.Errorf("user agent of %d bytes, want %d", n, tracing.DefaultAttributeValueLengthLimit)
	}
}
