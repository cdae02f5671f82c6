package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// audit.export builds one exporter per entry, named for its metrics; a
// JSONL file that cannot be created fails the build and closes the ones
// already started.
func TestAuditExporters(t *testing.T) {
	dir := t.TempDir()
	specs := []config.AuditExport{
		{Type: config.ExportJSONL, Path: filepath.Join(dir, "a.jsonl")},
		{Type: config.ExportWebhook, Name: "siem", URL: "http://127.0.0.1:1/"},
	}
	m := metrics.New()
	ex, err := auditExporters(specs, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if len(ex) != 2 || ex[0].Name() != "jsonl" || ex[1].Name() != "siem" {
		t.Fatalf("exporters %v", ex)
	}
	ex[0].Export(audit.Entry{ToolCall: store.ToolCall{Server: "s", Tool: "t", Outcome: "ok"}, Arguments: json.RawMessage(`{}`)})
	for _, e := range ex {
		if err := e.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
	if b, _ := os.ReadFile(specs[0].Path); !strings.Contains(string(b), `"server":"s"`) {
		t.Errorf("jsonl file: %q", b)
	}

	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o600)
	specs = append(specs, config.AuditExport{Type: config.ExportJSONL, Name: "bad", Path: filepath.Join(blocker, "x.jsonl")})
	if _, err := auditExporters(specs, nil, m); err == nil || !strings.Contains(err.Error(), "audit.export bad") {
		t.Errorf("error %v, want one naming audit.export bad", err)
	}
}
