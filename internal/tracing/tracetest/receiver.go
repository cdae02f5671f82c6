// Package tracetest is an OTLP trace receiver for tests, built on the
// official OTLP protobuf types: OTLP/HTTP (protobuf POST /v1/traces) and
// the gRPC TraceService. It keeps every span it is sent, flattened for
// assertions. It is for tests and benchmarks only and must not be
// imported by the gateway's own code.
package tracetest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened.
type Span struct {
	Service  string
	Name     string
	Kind     tracepb.Span_SpanKind
	TraceID  string
	SpanID   string
	ParentID string // "" for a root
	Attrs    map[string]string
	Links    []Link
	Events   []Event
	Status   tracepb.Status_StatusCode
}

// Link is one span link.
type Link struct {
	TraceID, SpanID string
	Attrs           map[string]string
}

// Event is one span event.
type Event struct {
	Name  string
	Attrs map[string]string
}

// Receiver collects the spans exported to it.
type Receiver struct {
	// Endpoint is where to export: a URL (OTLP/HTTP) or host:port (gRPC).
	Endpoint string
	// Headers are the request headers of the last export.
	mu      sync.Mutex
	spans   []Span
	headers map[string][]string
	exports int
}

// NewHTTP starts an OTLP/HTTP receiver; Endpoint is its base URL.
func NewHTTP(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
			http.NotFound(w, req)
			return
		}
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		data, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var msg collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(data, &msg); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.add(&msg, req.Header)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(ts.Close)
	r.Endpoint = ts.URL
	return r
}

// NewGRPC starts a gRPC TraceService receiver; Endpoint is host:port
// (plaintext).
func NewGRPC(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Receiver{Endpoint: lis.Addr().String()}
	s := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(s, &grpcService{r: r})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return r
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

func (g *grpcService) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	g.r.add(req, nil)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest, h http.Header) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrMap(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Service: service, Name: s.GetName(), Kind: s.GetKind(),
					TraceID: hexID(s.GetTraceId()), SpanID: hexID(s.GetSpanId()), ParentID: hexID(s.GetParentSpanId()),
					Attrs: attrMap(s.GetAttributes()), Status: s.GetStatus().GetCode(),
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, Link{TraceID: hexID(l.GetTraceId()), SpanID: hexID(l.GetSpanId()), Attrs: attrMap(l.GetAttributes())})
				}
				for _, e := range s.GetEvents() {
					sp.Events = append(sp.Events, Event{Name: e.GetName(), Attrs: attrMap(e.GetAttributes())})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.exports++
	if h != nil {
		r.headers = h.Clone()
	}
	r.mu.Unlock()
}

func hexID(b []byte) string {
	if len(b) == 0 || bytes.Count(b, []byte{0}) == len(b) {
		return ""
	}
	return hex.EncodeToString(b)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = valueString(kv.GetValue())
	}
	return m
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Header is a request header of the last OTLP/HTTP export.
func (r *Receiver) Header(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return http.Header(r.headers).Get(name)
}

// Reset forgets the spans received so far.
func (r *Receiver) Reset() {
	r.mu.Lock()
	r.spans = nil
	r.mu.Unlock()
}

// Count is how many spans arrived.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.spans)
}

// WaitFor waits (10s at most) until cond holds for the spans received.
func (r *Receiver) WaitFor(t testing.TB, what string, cond func([]Span) bool) []Span {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := r.Spans()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			for _, sp := range s {
				t.Logf("span %q kind=%v trace=%s id=%s parent=%s attrs=%v", sp.Name, sp.Kind, sp.TraceID, sp.SpanID, sp.ParentID, sp.Attrs)
			}
			t.Fatalf("timed out waiting for %s (%d spans)", what, len(s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Named returns the spans called name.
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// ByID returns the span with id, or a zero Span.
func ByID(spans []Span, id string) Span {
	for _, s := range spans {
		if s.SpanID == id {
			return s
		}
	}
	return Span{}
}

// Children returns the spans whose parent is id.
func Children(spans []Span, id string) []Span {
	var out []Span
	for _, s := range spans {
		if s.ParentID == id {
			out = append(out, s)
		}
	}
	return out
}
