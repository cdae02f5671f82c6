package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseLimits(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want Limits
	}{
		{"absent", "", DefaultLimits()},
		{"null", "limits:\n", DefaultLimits()},
		{"empty", "limits: {}\n", DefaultLimits()},
		{"all set", "limits:\n  max_batch: 5\n  max_inflight_per_session: 2\n  max_upstream_message: 1MiB\n  max_streams: 7\n" +
			"  read_header_timeout: 3s\n  idle_timeout: 1m\n  sse_write_timeout: 250ms\n  max_bound_sessions_per_server: 9\n",
			Limits{MaxBatch: 5, MaxInflightPerSession: 2, MaxUpstreamMessage: 1 << 20, MaxStreams: 7,
				ReadHeaderTimeout: 3 * time.Second, IdleTimeout: time.Minute, SSEWriteTimeout: 250 * time.Millisecond, MaxBoundPerServer: 9}},
		{"partial keeps the other defaults", "limits: {max_batch: 1}\n", func() Limits { l := DefaultLimits(); l.MaxBatch = 1; return l }()},
		{"bytes as an integer", "limits: {max_upstream_message: 4096}\n", func() Limits { l := DefaultLimits(); l.MaxUpstreamMessage = 4096; return l }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(c.Limits, tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func TestParseLimitsErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown key", "limits: {max_batches: 5}\n", []string{"limits.max_batches: unknown field (did you mean max_batch?) (line 1)"}},
		{"not a mapping", "limits: 5\n", []string{"limits: must be a mapping (line 1)"}},
		{"batch string", "limits: {max_batch: '5'}\n", []string{"limits.max_batch: must be an integer (line 1)"}},
		{"inflight float", "limits: {max_inflight_per_session: 1.5}\n", []string{"limits.max_inflight_per_session: must be an integer (line 1)"}},
		{"message size word", "limits: {max_upstream_message: big}\n", []string{`limits.max_upstream_message: must be a number of bytes or a size like "4MiB", "512KiB" or "1MB" (got "big") (line 1)`}},
		{"timeout without unit", "limits: {sse_write_timeout: 10}\n", []string{`limits.sse_write_timeout: must be a duration with a unit, like "30s", "1m" or "500ms" (got "10") (line 1)`}},
		{"zeros", "limits: {max_batch: 0, max_inflight_per_session: 0, max_upstream_message: 0, max_streams: 0, read_header_timeout: 0s, idle_timeout: 0s, sse_write_timeout: 0s, max_bound_sessions_per_server: 0}\n", []string{
			"limits.max_batch: must be >= 1 (line 1)",
			"limits.max_inflight_per_session: must be >= 1 (line 1)",
			"limits.max_upstream_message: must be > 0 (line 1)",
			"limits.max_streams: must be >= 1 (line 1)",
			"limits.max_bound_sessions_per_server: must be >= 1 (line 1)",
			"limits.read_header_timeout: must be > 0 (line 1)",
			"limits.idle_timeout: must be > 0 (line 1)",
			"limits.sse_write_timeout: must be > 0 (line 1)",
		}},
		{"negative", "limits: {max_streams: -1, idle_timeout: -1s}\n", []string{"limits.max_streams: must be >= 1 (line 1)", "limits.idle_timeout: must be > 0 (line 1)"}},
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

// A Config built in code may leave the limits zero: valid, and read as
// the defaults.
func TestLimitsZeroMeansDefault(t *testing.T) {
	if err := (&Config{}).Validate(); err != nil {
		t.Fatalf("Validate of zero limits: %v", err)
	}
	if diff := cmp.Diff(Limits{}.OrDefaults(), DefaultLimits()); diff != "" {
		t.Errorf("OrDefaults (-got +want):\n%s", diff)
	}
	err := (&Config{Limits: Limits{MaxBatch: -1}}).Validate()
	if err == nil || !strings.Contains(err.Error(), "limits.max_batch: must be >= 1") {
		t.Errorf("negative max_batch: %v", err)
	}
}
