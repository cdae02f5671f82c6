package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

// TestExportedEvent: an entry carrying an Event (tool integrity's
// integrity.* events) is exported in its own shape, beside tool calls in
// theirs, with its detail as given.
func TestExportedEvent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	j, err := NewJSONL(path, 1<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	batch := []Entry{
		{ToolCall: store.ToolCall{Time: at, Server: "rug", Tool: "add"},
			Event: &Event{Action: "integrity.changed", Actor: "mcpgate", Target: "rug/add", Detail: json.RawMessage(`{"diff":"- a\n+ b\n"}`)}},
		{ToolCall: store.ToolCall{Time: at, Server: "rug", Tool: "echo", Outcome: store.OutcomeOK}},
	}
	if err := j.Send(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), b)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"v": float64(1), "time": "2026-12-03T07:00:00Z", "event": "integrity.changed", "actor": "mcpgate",
		"target": "rug/add", "server": "rug", "detail": map[string]any{"diff": "- a\n+ b\n"}}
	for k, v := range want {
		if got, _ := json.Marshal(ev[k]); string(got) != mustJSON(v) {
			t.Errorf("event %s = %s, want %s", k, got, mustJSON(v))
		}
	}
	if _, ok := ev["outcome"]; ok || len(ev) != len(want) {
		t.Errorf("event carries tool-call fields: %s", lines[0])
	}
	if !strings.Contains(lines[1], `"outcome":"ok"`) || strings.Contains(lines[1], `"event"`) {
		t.Errorf("tool call line: %s", lines[1])
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
