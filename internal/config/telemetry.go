package config

import (
	"net/url"
	"strings"
	"time"
)

// Telemetry says how the gateway explains itself beyond metrics and logs:
// traces (SPEC S16.2) and the debug header (S16.4).
type Telemetry struct {
	// Tracing: nil means no tracer is built, unless the standard
	// OTEL_EXPORTER_OTLP_* variables name an endpoint.
	Tracing *Tracing `config:"tracing" doc:"OpenTelemetry tracing (SPEC S16.2), exported over OTLP. Off when absent, unless OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set."`
	// DebugHeader lets every caller ask for x-mcpgate-debug diagnostics;
	// admin callers may always.
	DebugHeader bool `config:"debug_header" doc:"Honour x-mcpgate-debug: true from every caller (SPEC S16.4): the response names the route, the caller, the servers reached, the credential source per upstream (masked), whether an upstream session was reused or created, and the gateway's own share of the latency. Admin callers (the master key, admin keys) get it without this. Default: false."`
}

// Tracing configures the OTLP trace exporter. A field left empty falls
// back to its standard OTEL_* variable (internal/tracing reads them), so a
// deployment can configure tracing by environment alone.
type Tracing struct {
	Endpoint    string            `config:"endpoint,expand,trim" doc:"Where spans go: host:port (gRPC, usually :4317) or a URL (http/protobuf, usually http://collector:4318; /v1/traces is added when the URL has no path). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317 (grpc) or http://localhost:4318 (http/protobuf)."`
	Protocol    string            `config:"protocol,enum=grpc|http/protobuf,trim,lower" doc:"OTLP transport. Default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf."`
	SampleRatio *float64          `config:"sample_ratio,min=0,max=1" doc:"Share of traces started here that are recorded (0 to 1); a request whose traceparent header is sampled is always recorded (parent-based). Default: OTEL_TRACES_SAMPLER(_ARG) when set, else 1."`
	Headers     map[string]string `config:"headers,expand,secret" doc:"Headers sent with every export, such as an API key for a hosted collector. Added to OTEL_EXPORTER_OTLP_(TRACES_)HEADERS."`
	Insecure    bool              `config:"insecure" doc:"Export without TLS: plaintext gRPC, or an http:// URL allowed. An http:// endpoint URL implies it. Default: OTEL_EXPORTER_OTLP_(TRACES_)INSECURE, else false (TLS)."`
	Timeout     time.Duration     `config:"timeout,positive" doc:"Deadline of one export request. Default: OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT, else 10s."`
	ServiceName string            `config:"service_name,expand,trim" doc:"The service.name resource attribute. Default: OTEL_SERVICE_NAME, else mcpgate."`
}

func (t *Tracing) validate(errs *errorList, strict bool) {
	const p = "telemetry.tracing"
	checkFields(errs, p, t, strict)
	if e := t.Endpoint; strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs.add(p+".endpoint", 0, "must be host:port or an http(s):// URL")
		}
	}
}

// Reload says how a changed config file is applied without a restart
// (SIGHUP and POST /admin/v1/reload always work).
type Reload struct {
	Watch    bool          `config:"watch" doc:"Watch the config file and reload when its content changes (checked every watch_interval; follows symlinks, so a Kubernetes ConfigMap update is seen). SIGHUP and POST /admin/v1/reload reload it whatever this says. Default: false."`
	Interval time.Duration `config:"watch_interval,positive" doc:"How often the watched file is read back and compared. Default: 2s."`
}

// DefaultWatchInterval is how often a watched config file is read back.
const DefaultWatchInterval = 2 * time.Second

// IntervalOrDefault is watch_interval, or its default.
func (r Reload) IntervalOrDefault() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultWatchInterval
}
