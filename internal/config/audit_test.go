package config

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseAuditExport(t *testing.T) {
	doc := `
audit:
  export:
    - type: jsonl
      path: logs/audit.jsonl
      max_size: 10MiB
      max_files: 3
    - type: webhook
      name: siem
      url: https://siem.example.com/ingest?k=${HOOK_KEY}
      headers: {Authorization: "Bearer ${HOOK_TOKEN}"}
      format: ndjson
      batch: 50
      flush_interval: 2s
      timeout: 3s
      queue_size: 500
    - type: webhook
      name: plain
      url: http://127.0.0.1:9000/
servers:
  s:
    transport: stdio
    command: x
    audit: {arguments: true, redact: ["Session*", "otp"]}
  t:
    transport: stdio
    command: x
`
	c, err := Parse([]byte(doc), "/etc/mcpgate", envOf(map[string]string{"HOOK_KEY": "k1", "HOOK_TOKEN": "t1"}))
	if err != nil {
		t.Fatal(err)
	}
	ex := c.Audit.Export
	if len(ex) != 3 {
		t.Fatalf("%d exporters", len(ex))
	}
	type got struct {
		Name, Path, URL, Format string
		Size                    int64
		Files, Batch, Queue     int
		Flush, Timeout          time.Duration
		Headers                 map[string]string
	}
	view := func(e AuditExport) got {
		return got{e.NameOrDefault(), e.Path, e.URL, e.FormatOrDefault(), e.MaxSizeOrDefault(), e.MaxFilesOrDefault(),
			e.BatchOrDefault(), e.QueueSizeOrDefault(), e.FlushIntervalOrDefault(), e.TimeoutOrDefault(), e.Headers}
	}
	want := []got{
		{Name: "jsonl", Path: "/etc/mcpgate/logs/audit.jsonl", Format: "json", Size: 10 << 20, Files: 3, Batch: 100, Queue: 10000, Flush: time.Second, Timeout: 5 * time.Second},
		{Name: "siem", URL: "https://siem.example.com/ingest?k=k1", Format: "ndjson", Size: 100 << 20, Files: 5, Batch: 50, Queue: 500, Flush: 2 * time.Second, Timeout: 3 * time.Second,
			Headers: map[string]string{"Authorization": "Bearer t1"}},
		{Name: "plain", URL: "http://127.0.0.1:9000/", Format: "json", Size: 100 << 20, Files: 5, Batch: 100, Queue: 10000, Flush: time.Second, Timeout: 5 * time.Second},
	}
	var gots []got
	for _, e := range ex {
		gots = append(gots, view(e))
	}
	if diff := cmp.Diff(gots, want); diff != "" {
		t.Errorf("exporters (-got +want):\n%s", diff)
	}
	s := c.Servers["s"].Audit
	if s == nil || !s.Arguments {
		t.Fatalf("servers.s.audit %+v", s)
	}
	if diff := cmp.Diff(s.RedactPatterns(), []string{"session*", "otp", "*password*", "*token*", "*secret*", "*key*", "authorization"}); diff != "" {
		t.Errorf("redact patterns (-got +want):\n%s", diff)
	}
	if c.Servers["t"].Audit != nil {
		t.Errorf("servers.t.audit %+v, want absent", c.Servers["t"].Audit)
	}
}

func TestParseAuditExportErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"unknown type", "audit: {export: [{type: kafka}]}\n", "audit.export[0].type: must be one of jsonl, webhook"},
		{"no type", "audit: {export: [{path: /x}]}\n", "audit.export[0].type: required"},
		{"missing path", "audit: {export: [{type: jsonl}]}\n", "audit.export[0].path: required for export type jsonl"},
		{"missing url", "audit: {export: [{type: webhook}]}\n", "audit.export[0].url: required for export type webhook"},
		{"bad size", "audit: {export: [{type: jsonl, path: /x, max_size: 10 parsecs}]}\n", "audit.export[0].max_size"},
		{"max_files 0", "audit: {export: [{type: jsonl, path: /x, max_files: -1}]}\n", "audit.export[0].max_files: must be >= 1"},
		{"url on jsonl", "audit: {export: [{type: jsonl, path: /x, url: 'http://h/'}]}\n", "audit.export[0].url: not allowed for export type jsonl"},
		{"path on webhook", "audit: {export: [{type: webhook, url: 'http://h/', path: /x}]}\n", "audit.export[0].path: not allowed for export type webhook"},
		{"bad url", "audit: {export: [{type: webhook, url: 'ftp://h/'}]}\n", "audit.export[0].url: must be an http or https URL"},
		{"bad format", "audit: {export: [{type: webhook, url: 'http://h/', format: xml}]}\n", "audit.export[0].format: must be one of json, ndjson"},
		{"bad timeout", "audit: {export: [{type: webhook, url: 'http://h/', timeout: soon}]}\n", "audit.export[0].timeout"},
		{"content-type header", "audit: {export: [{type: webhook, url: 'http://h/', headers: {content-type: x}}]}\n", "audit.export[0].headers.content-type: header is set by the gateway"},
		{"duplicate name", "audit: {export: [{type: jsonl, path: /a}, {type: jsonl, path: /b}]}\n", `audit.export[1].name: exporter "jsonl" is also audit.export[0]`},
		{"same file", "audit: {export: [{type: jsonl, path: /a}, {type: jsonl, name: b, path: /a}]}\n", "audit.export[1].path: same file as audit.export[0]"},
		{"bad name", "audit: {export: [{type: jsonl, name: 'My Log', path: /a}]}\n", "audit.export[0].name: must be 1 to 32 of [a-z0-9_-]"},
		{"unknown key", "audit: {export: [{type: jsonl, path: /a, rotate: daily}]}\n", "audit.export[0].rotate"},
		{"bad redact", srv("audit: {arguments: true, redact: ['[']}"), "servers.s.audit.redact[0]: must be a glob pattern"},
		{"arguments not bool", srv("audit: {arguments: maybe}"), "servers.s.audit.arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", envOf(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A webhook's URL and headers may carry credentials: no message echoes
// them.
func TestAuditExportSecretsNeverEchoed(t *testing.T) {
	for _, doc := range []string{
		"audit: {export: [{type: webhook, url: 'ftp://hunter2@h/'}]}\n",
		"audit: {export: [{type: webhook, url: 'http://h/', headers: {X-Key: \"hunter2\\r\\n\"}}]}\n",
		"audit: {export: [{type: webhook, url: ['hunter2']}]}\n",
		"audit: {export: [{type: jsonl, path: /x, url: 'http://hunter2@h/'}]}\n",
	} {
		_, err := Parse([]byte(doc), "", envOf(nil))
		if err == nil {
			t.Fatalf("%s accepted", doc)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the secret is echoed: %v", err)
		}
	}
}
