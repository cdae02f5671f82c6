package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/tracing/tracetest"
)

// TestTracingEndToEnd runs the real binary with tracing configured by the
// config file (OTLP/HTTP, with a header) and then by OTEL_* variables
// alone (gRPC): a tools/call is traced under the caller's traceparent,
// and the spans still queued reach the collector when SIGTERM stops it.
func TestTracingEndToEnd(t *testing.T) {
	gw, notes := buildBinary(t)
	const (
		clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		callBody    = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes__add_note","arguments":{"title":"t","body":"secret-note-body"}}}`
	)
	run := func(t *testing.T, rcv *tracetest.Receiver, tracingYAML string, env ...string) []tracetest.Span {
		t.Helper()
		cfg := filepath.Join(t.TempDir(), "gw.yaml")
		doc := fmt.Sprintf("servers:\n  notes:\n    transport: stdio\n    command: %s\n%s", notes, tracingYAML)
		if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		p := startGateway(t, gw, cfg, env...)
		req, _ := http.NewRequest(http.MethodPost, p.url+"/mcp", strings.NewReader(callBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call: %d", resp.StatusCode)
		}
		// Straight to SIGTERM: the batch (5 s by default) has not gone out;
		// the stop must flush it.
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.done:
			if err != nil {
				t.Fatalf("exit: %v\n%s", err, p.Log())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no exit after SIGTERM")
		}
		spans := rcv.Spans()
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
			if s.TraceID == clientTrace || s.Name == "POST /mcp" {
				for k, v := range s.Attrs {
					if strings.Contains(v, "secret-note-body") {
						t.Errorf("span %q attribute %s holds the argument", s.Name, k)
					}
				}
			}
		}
		for _, want := range []string{"POST /mcp", "tools/call notes__add_note", "tools/call add_note"} {
			found := false
			for _, s := range tracetest.Named(spans, want) {
				found = found || s.TraceID == clientTrace
			}
			if !found {
				t.Errorf("no span %q in the caller's trace; got %q", want, names)
			}
		}
		return spans
	}
	t.Run("config file, http/protobuf", func(t *testing.T) {
		rcv := tracetest.NewHTTP(t)
		spans := run(t, rcv, fmt.Sprintf("telemetry:\n  tracing:\n    endpoint: %s\n    protocol: http/protobuf\n    sample_ratio: 1\n    headers: {x-api-key: '${TEST_OTLP_KEY}'}\n    service_name: e2e-file\n", rcv.Endpoint),
			"TEST_OTLP_KEY=k-e2e", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_SERVICE_NAME=ignored")
		if got := rcv.Header("x-api-key"); got != "k-e2e" {
			t.Errorf("x-api-key header %q", got)
		}
		if len(spans) > 0 && spans[0].Service != "e2e-file" {
			t.Errorf("service %q", spans[0].Service)
		}
	})
	t.Run("environment only, grpc", func(t *testing.T) {
		rcv := tracetest.NewGRPC(t)
		spans := run(t, rcv, "", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+rcv.Endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_SERVICE_NAME=e2e-env")
		if len(spans) > 0 && spans[0].Service != "e2e-env" {
			t.Errorf("service %q", spans[0].Service)
		}
	})
}
