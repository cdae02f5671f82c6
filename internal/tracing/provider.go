// Package tracing owns mcpgate's OpenTelemetry tracing (SPEC S16.2): it
// builds the tracer provider and its OTLP exporter from telemetry.tracing
// and the standard OTEL_* variables, and it holds the span rules the
// gateway and the upstream client follow.
//
//	HTTP request  -> server span "POST /mcp" (parent: the traceparent header)
//	  MCP message -> server span "tools/call weather.get" (links: the
//	                 message's params._meta traceparent)
//	    upstream  -> client span "tools/call get" (traceparent header and
//	                 params._meta.traceparent sent to the server)
//	    connect   -> "mcp.upstream.start", "mcp.upstream.handshake",
//	                 "oauth2.token" internal spans
//
// Only the gateway's own context is ever a parent or propagated: a
// message's _meta trace context becomes a span link, and baggage (the
// header or _meta) is never read and never forwarded, so a client cannot
// spoof attribution. It must not record tool arguments, secrets, header
// values or raw session ids, and it must not import the gateway or the
// upstream packages (both use it). Off (a nil *Provider, no span in a
// context), every helper returns at once without allocating.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The OTLP transports.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is service.name when neither the config nor
// OTEL_SERVICE_NAME names one.
const DefaultServiceName = "mcpgate"

// DefaultAttributeValueLengthLimit bounds a span attribute's value unless
// OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT is set.
const DefaultAttributeValueLengthLimit = 512

// instrumentation is the tracer's instrumentation scope.
const instrumentation = "github.com/mcpgate/mcpgate"

// Options are what New needs besides the config section.
type Options struct {
	// Version is service.version.
	Version string
	// LookupEnv reads the OTEL_* variables this package interprets
	// (whether tracing is on, protocol, sampler, service name, headers);
	// nil means os.LookupEnv. The exporters read the rest of
	// OTEL_EXPORTER_OTLP_* (endpoint, timeout, TLS) from the process.
	LookupEnv func(string) (string, bool)
	// Exporter replaces the OTLP exporter (tests, benchmarks); nil: OTLP.
	Exporter sdktrace.SpanExporter
	// Logger hears export failures; nil discards them.
	Logger *slog.Logger
}

// Provider is a built tracer provider. A nil *Provider is tracing off:
// every method is safe to call on it and does nothing.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	log    *slog.Logger
}

// Enabled reports whether tracing is on for section c and the
// environment: a telemetry.tracing section, or an OTLP endpoint variable;
// OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
func Enabled(c *config.Tracing, env func(string) (string, bool)) bool {
	if env == nil {
		env = os.LookupEnv
	}
	if v, _ := env("OTEL_SDK_DISABLED"); strings.EqualFold(strings.TrimSpace(v), "true") {
		return false
	}
	if v, _ := env("OTEL_TRACES_EXPORTER"); strings.EqualFold(strings.TrimSpace(v), "none") {
		return false
	}
	if c != nil {
		return true
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v, ok := env(k); ok && strings.TrimSpace(v) != "" {
			return true
		}
	}
	return false
}

// New builds the provider for section c (nil: from the environment
// alone). It returns nil, nil when tracing is off (Enabled), so that
// nothing is built. The exporter connects lazily: an unreachable
// collector costs dropped spans, never a failed start.
func New(ctx context.Context, c *config.Tracing, o Options) (*Provider, error) {
	env := o.LookupEnv
	if env == nil {
		env = os.LookupEnv
	}
	if !Enabled(c, env) {
		return nil, nil
	}
	if c == nil {
		c = &config.Tracing{}
	}
	exp := o.Exporter
	if exp == nil {
		var err error
		if exp, err = newExporter(ctx, c, env); err != nil {
			return nil, err
		}
	}
	res, err := newResource(c, o.Version, env)
	if err != nil {
		return nil, err
	}
	// Client-chosen values (a request id, a user agent, a path) end up in
	// attributes: bounded unless OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT
	// says otherwise.
	limits := sdktrace.NewSpanLimits()
	if limits.AttributeValueLengthLimit < 0 {
		limits.AttributeValueLengthLimit = DefaultAttributeValueLengthLimit
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithSpanLimits(limits)}
	if s := sampler(c, env); s != nil {
		opts = append(opts, sdktrace.WithSampler(s))
	}
	// Without WithSampler the SDK reads OTEL_TRACES_SAMPLER(_ARG) itself,
	// and defaults to parentbased_always_on.
	tp := sdktrace.NewTracerProvider(opts...)
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The SDK reports export failures to the process-wide handler; the
	// binary builds one provider.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing: export failed", "error", err) }))
	return &Provider{tp: tp, tracer: tp.Tracer(instrumentation), log: log}, nil
}

// sampler is the configured sample_ratio, parent-based: a request whose
// traceparent says sampled is recorded, one that says not is not. nil
// leaves the choice to OTEL_TRACES_SAMPLER.
func sampler(c *config.Tracing, env func(string) (string, bool)) sdktrace.Sampler {
	if c.SampleRatio == nil {
		if _, ok := env("OTEL_TRACES_SAMPLER"); ok {
			return nil
		}
		return sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))
}

func newResource(c *config.Tracing, version string, env func(string) (string, bool)) (*resource.Resource, error) {
	name := c.ServiceName
	if name == "" {
		if v, ok := env("OTEL_SERVICE_NAME"); ok && strings.TrimSpace(v) != "" {
			name = strings.TrimSpace(v)
		}
	}
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// OTEL_RESOURCE_ATTRIBUTES adds to these; the service name above wins.
	var extra []attribute.KeyValue
	if v, ok := env("OTEL_RESOURCE_ATTRIBUTES"); ok {
		for _, kv := range strings.Split(v, ",") {
			k, val, found := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !found || k == "" || k == "service.name" {
				continue
			}
			if u, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
				extra = append(extra, attribute.String(k, u))
			}
		}
	}
	return resource.NewSchemaless(append(extra, attrs...)...), nil
}

// protocol is the section's protocol, else the variables', else
// http/protobuf (the OTLP default).
func protocol(c *config.Tracing, env func(string) (string, bool)) (string, error) {
	p := c.Protocol
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p != "" {
			break
		}
		if v, ok := env(k); ok {
			p = strings.ToLower(strings.TrimSpace(v))
		}
	}
	switch p {
	case "":
		return ProtocolHTTP, nil
	case ProtocolGRPC, ProtocolHTTP:
		return p, nil
	}
	return "", fmt.Errorf("tracing: OTLP protocol %q is not supported (grpc or http/protobuf)", p)
}

// newExporter builds the OTLP exporter. What the section leaves empty the
// exporter reads from OTEL_EXPORTER_OTLP_* itself (endpoint, headers,
// timeout, insecure, certificates, compression).
func newExporter(ctx context.Context, c *config.Tracing, env func(string) (string, bool)) (sdktrace.SpanExporter, error) {
	proto, err := protocol(c, env)
	if err != nil {
		return nil, err
	}
	headers := envHeaders(env)
	for k, v := range c.Headers {
		headers[k] = v
	}
	var client otlptrace.Client
	switch proto {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if e := c.Endpoint; strings.Contains(e, "://") {
			opts = append(opts, otlptracegrpc.WithEndpointURL(e))
		} else if e != "" {
			opts = append(opts, otlptracegrpc.WithEndpoint(e))
		}
		if c.Insecure || strings.HasPrefix(c.Endpoint, "http://") {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(headers))
		}
		if c.Timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(c.Timeout))
		}
		client = otlptracegrpc.NewClient(opts...)
	default:
		var opts []otlptracehttp.Option
		if e := c.Endpoint; strings.Contains(e, "://") {
			u, err := url.Parse(e)
			if err != nil {
				return nil, errors.New("tracing: endpoint is not a URL") // validated: no echo of a URL that may hold a token
			}
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces"
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		} else if e != "" {
			opts = append(opts, otlptracehttp.WithEndpoint(e))
		}
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if len(headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(headers))
		}
		if c.Timeout > 0 {
			opts = append(opts, otlptracehttp.WithTimeout(c.Timeout))
		}
		client = otlptracehttp.NewClient(opts...)
	}
	// New starts the client; neither transport dials eagerly.
	return otlptrace.New(ctx, client)
}

// envHeaders reads OTEL_EXPORTER_OTLP_HEADERS and then ..._TRACES_HEADERS
// (k=v pairs, comma separated, values URL-encoded): the section's headers
// are added to them, which WithHeaders alone would replace.
func envHeaders(env func(string) (string, bool)) map[string]string {
	h := map[string]string{}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v, ok := env(k)
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			name, val, found := strings.Cut(kv, "=")
			name = strings.TrimSpace(name)
			if !found || name == "" {
				continue
			}
			if u, err := url.PathUnescape(strings.TrimSpace(val)); err == nil {
				h[name] = u
			}
		}
	}
	return h
}

// Shutdown flushes the spans still queued and stops the exporter. A
// collector that cannot be reached costs those spans (logged), never the
// gateway's clean stop, so the error is only for tests.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	err := p.tp.Shutdown(ctx)
	if err != nil {
		p.log.Warn("tracing: spans lost at shutdown", "error", err)
	}
	return err
}

// ForceFlush exports the spans still queued (tests).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// tracerOf is the tracer of the span in ctx, or nil when ctx holds no
// recording span: the rule by which layers below the gateway (upstream,
// OAuth) trace only within a traced request, with no tracer passed in.
func tracerOf(ctx context.Context) (trace.Tracer, trace.Span) {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return nil, nil
	}
	return sp.TracerProvider().Tracer(instrumentation), sp
}

// propagator is the only propagator: W3C trace context, never baggage.
var propagator = propagation.TraceContext{}
