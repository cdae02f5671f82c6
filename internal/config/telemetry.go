package config

import "time"

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

// Tracing configures the OTLP trace exporter.
type Tracing struct{}

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
