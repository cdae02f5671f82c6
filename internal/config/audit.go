package config

import (
	"maps"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// Audit says how tool-call records reach the store (SPEC S16.3), and
// which other places they are exported to.
type Audit struct {
	Durable *bool         `config:"durable" doc:"A tool call's answer waits until its audit record is committed to the store; the records of concurrent calls share one transaction. A crash (SIGKILL, power loss) then loses no record of an answered call, at the cost of one commit on the reply's path (see docs/benchmarks.md). Off: records are written in batches at least every 200 ms, and a crash can lose the last ones. Default: on with store.driver postgres (a fleet: SPEC S15 promises that a killed replica loses no acknowledged record), off with the embedded SQLite store."`
	Timeout time.Duration `config:"durable_timeout,positive" doc:"With durable: how long (default 5s) an answer waits for its record's commit; past it the answer goes out, the record stays queued (written once the store takes it) and mcpgate_audit_unconfirmed_total counts it."`
	Export  []AuditExport `config:"export" doc:"Where tool-call records also go, besides the store: JSONL files or an HTTP webhook. Each exporter has its own bounded queue: a slow one never slows the store or a call; when its queue is full its records are dropped and counted (mcpgate_audit_export_dropped_total{exporter})."`
}

// Audit export types.
const (
	ExportJSONL   = "jsonl"
	ExportWebhook = "webhook"
)

// Webhook body formats.
const (
	ExportFormatJSON   = "json"
	ExportFormatNDJSON = "ndjson"
)

// Defaults of an audit.export entry.
const (
	DefaultExportMaxSize       = 100 << 20
	DefaultExportMaxFiles      = 5
	DefaultExportBatch         = 100
	DefaultExportFlushInterval = time.Second
	DefaultExportTimeout       = 5 * time.Second
	DefaultExportQueueSize     = 10000
)

// AuditExport is one audit exporter. Zero fields mean their defaults
// (the *OrDefault methods).
type AuditExport struct {
	Type string `config:"type,required,enum=jsonl|webhook,disc=export type,trim,lower" doc:"jsonl (one JSON object per line, to a file rotated by size) or webhook (batches POSTed to an HTTP endpoint)."`
	Name string `config:"name,trim" doc:"The exporter's name in metrics and logs (the exporter label): [a-z0-9_-], unique. Default: its type."`

	Path     string `config:"path,required,when=jsonl,expand,path" doc:"For jsonl: the file, relative to the config file's directory; created 0600, its directory 0700. Rotated files are path.1 (newest) to path.N."`
	MaxSize  int64  `config:"max_size,when=jsonl,size,positive" doc:"For jsonl: the file is rotated before a write would take it past this size (default 100MiB)."`
	MaxFiles int    `config:"max_files,when=jsonl,min=1" doc:"For jsonl: how many rotated files are kept beside the live one (default 5); the oldest is removed."`

	URL     string            `config:"url,required,when=webhook,expand,secret" doc:"For webhook: the http or https endpoint. Requests follow no redirect to another host; no message echoes the URL."`
	Headers map[string]string `config:"headers,when=webhook,expand,secret" doc:"For webhook: headers sent with every request (an Authorization token, say). Never logged."`
	Format  string            `config:"format,when=webhook,enum=json|ndjson,trim,lower" doc:"For webhook: json (a JSON array, application/json, the default) or ndjson (one object per line, application/x-ndjson)."`
	Timeout time.Duration     `config:"timeout,when=webhook,positive" doc:"For webhook: how long one request may take (default 5s). A failed batch is retried with backoff, at most 3 attempts, then dropped and counted."`

	Batch         int           `config:"batch,min=1" doc:"The most records in one write or request (default 100)."`
	FlushInterval time.Duration `config:"flush_interval,positive" doc:"The longest a record waits for its batch to fill (default 1s); a jsonl file is also fsynced at this interval."`
	QueueSize     int           `config:"queue_size,min=1" doc:"How many records may wait for this exporter (default 10000); past it they are dropped and counted."`

	Line int `config:",line"`
}

// NameOrDefault is Name, else the type.
func (e AuditExport) NameOrDefault() string {
	if e.Name != "" {
		return e.Name
	}
	return e.Type
}

// MaxSizeOrDefault is MaxSize, else DefaultExportMaxSize.
func (e AuditExport) MaxSizeOrDefault() int64 { return orDefault(e.MaxSize, DefaultExportMaxSize) }

// MaxFilesOrDefault is MaxFiles, else DefaultExportMaxFiles.
func (e AuditExport) MaxFilesOrDefault() int { return orDefault(e.MaxFiles, DefaultExportMaxFiles) }

// BatchOrDefault is Batch, else DefaultExportBatch.
func (e AuditExport) BatchOrDefault() int { return orDefault(e.Batch, DefaultExportBatch) }

// FlushIntervalOrDefault is FlushInterval, else DefaultExportFlushInterval.
func (e AuditExport) FlushIntervalOrDefault() time.Duration {
	return orDefault(e.FlushInterval, DefaultExportFlushInterval)
}

// TimeoutOrDefault is Timeout, else DefaultExportTimeout.
func (e AuditExport) TimeoutOrDefault() time.Duration {
	return orDefault(e.Timeout, DefaultExportTimeout)
}

// QueueSizeOrDefault is QueueSize, else DefaultExportQueueSize.
func (e AuditExport) QueueSizeOrDefault() int { return orDefault(e.QueueSize, DefaultExportQueueSize) }

// FormatOrDefault is Format, else json.
func (e AuditExport) FormatOrDefault() string {
	if e.Format == "" {
		return ExportFormatJSON
	}
	return e.Format
}

func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// ServerAudit is a server's audit settings.
type ServerAudit struct {
	Arguments bool     `config:"arguments" doc:"Exported audit records (audit.export, never the store) carry the call's arguments, with the values of keys matching redact, or a default pattern, replaced by \"[REDACTED]\". Off: no arguments anywhere."`
	Redact    []string `config:"redact" doc:"Key glob patterns (path.Match syntax, case-insensitive: \"*token*\", \"secret*\") whose values are redacted, at any depth of objects and arrays; always added: *password*, *token*, *secret*, *key*, authorization."`
}

// DefaultRedact are the key patterns always redacted from exported
// arguments.
var DefaultRedact = []string{"*password*", "*token*", "*secret*", "*key*", "authorization"}

// RedactPatterns is Redact with DefaultRedact added, lower-cased.
func (a *ServerAudit) RedactPatterns() []string {
	var out []string
	if a != nil {
		for _, p := range a.Redact {
			out = append(out, strings.ToLower(strings.TrimSpace(p)))
		}
	}
	for _, p := range DefaultRedact {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// DurableFor reports whether records are durable for a config whose
// store driver is driver (the default depends on it).
func (a Audit) DurableFor(driver string) bool {
	if a.Durable != nil {
		return *a.Durable
	}
	return driver == StorePostgres
}

// TimeoutOrDefault is Timeout, 5s when unset.
func (a Audit) TimeoutOrDefault() time.Duration {
	if a.Timeout <= 0 {
		return 5 * time.Second
	}
	return a.Timeout
}

func (a *Audit) validate(errs *errorList, strict bool) {
	names := map[string]int{}
	paths := map[string]int{}
	for i := range a.Export {
		e, p := &a.Export[i], indexPath("audit.export", i)
		checkFields(errs, p, e, strict)
		if n := e.NameOrDefault(); n != "" {
			if !validExporterName(n) {
				errs.add(p+".name", e.Line, "must be 1 to 32 of [a-z0-9_-] (got %q)", truncate(n, 40))
			} else if j, dup := names[n]; dup {
				errs.add(p+".name", e.Line, "exporter %q is also audit.export[%d]; give each a name", n, j)
			} else {
				names[n] = i
			}
		}
		switch e.Type {
		case ExportJSONL:
			if strings.ContainsRune(e.Path, 0) {
				errs.add(p+".path", e.Line, "must not contain NUL")
			} else if j, dup := paths[e.Path]; dup && e.Path != "" {
				errs.add(p+".path", e.Line, "same file as audit.export[%d]", j)
			} else {
				paths[e.Path] = i
			}
		case ExportWebhook:
			if e.URL != "" && !validURL(e.URL) {
				errs.add(p+".url", e.Line, "must be an http or https URL") // may carry credentials: not echoed
			}
			for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
				fp := joinPath(p+".headers", k)
				switch canon := textproto.CanonicalMIMEHeaderKey(k); {
				case !validToken(k):
					errs.add(fp, e.Line, "invalid header name (want an HTTP token)")
				case canon == "Content-Type" || canon == "Content-Length" || canon == "Host":
					errs.add(fp, e.Line, "header is set by the gateway and must not be configured")
				}
				if strings.ContainsAny(e.Headers[k], "\r\n\x00") {
					errs.add(fp, e.Line, "value must not contain CR, LF or NUL")
				}
			}
		}
	}
}

func validExporterName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// AccessLog says where the one-line-per-request access log goes.
type AccessLog struct {
	Enabled *bool  `config:"enabled" doc:"Write one line per HTTP request (method, route, status, bytes, milliseconds, caller alias and user, session hash, MCP method and tool; never a secret, query string or argument). Health probes and /metrics are not logged. Default: true."`
	Path    string `config:"path,expand,trim,path" doc:"A file for the access log (JSON lines, created 0600, appended to); empty: the gateway's own log, at info."`
}

// On reports whether the access log is written (default true).
func (a AccessLog) On() bool { return a.Enabled == nil || *a.Enabled }
