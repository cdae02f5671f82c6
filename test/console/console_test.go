// Package console_test drives the web console (/ui) of the real mcpgate
// binary in headless Chromium (Debian's chromium package, installed by
// scripts/install-test-deps.sh) over the DevTools protocol with chromedp.
// A failing step saves a screenshot and the page's JS errors in the test
// output; any JS error fails the test.
package console_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/test/internal/gwproc"
)

const masterKey = "console-master-key-0123456789"

// orderSchema has every kind of field the playground's form generates.
const orderSchema = `{"type":"object","properties":{
 "item":{"type":"string","description":"what to order"},
 "qty":{"type":"integer","minimum":1},
 "size":{"enum":["S","M","L"]},
 "gift":{"type":"boolean"},
 "tags":{"type":"array","items":{"type":"string"}},
 "ship":{"type":"object","properties":{"city":{"type":"string"}}}},
 "required":["item"]}`

// shop is a real MCP server (the go-sdk's) whose tool echoes its arguments.
func shop(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "shop", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "order", Description: "Order an item", InputSchema: json.RawMessage(orderSchema)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ordered " + string(req.Params.Arguments)}}}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "refund", Description: "Refund an order", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "refunded"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// startGateway builds and runs mcpgate serve on a fresh SQLite store.
// gateway holds the binary gatewayBinary built: once per test run (linking
// mcpgate takes seconds, and most tests start a gateway), into a
// directory TestMain removes.
var gateway struct {
	once    sync.Once
	dir     string
	cleanup func()
	err     error
	out     []byte
}

// TestMain removes the binary the tests ran (unless its directory is the
// shared gwproc.BinDirEnv).
func TestMain(m *testing.M) {
	code := m.Run()
	if gateway.cleanup != nil {
		gateway.cleanup()
	}
	os.Exit(code)
}

// gatewayBinary builds cmd/mcpgate once and answers its path. Tests only
// run it; none may write beside it.
func gatewayBinary(t *testing.T) string {
	t.Helper()
	gateway.once.Do(func() {
		if gateway.dir, gateway.cleanup, gateway.err = gwproc.BinDir("mcpgate-console-test-"); gateway.err != nil {
			return
		}
		gateway.out, gateway.err = exec.Command("go", "build", "-o", gateway.dir+"/", "../../cmd/mcpgate").CombinedOutput()
	})
	if gateway.err != nil {
		t.Fatalf("build: %v\n%s", gateway.err, gateway.out)
	}
	return filepath.Join(gateway.dir, "mcpgate")
}

func startGateway(t *testing.T) string {
	return startGatewayWith(t, "data_dir: ./data\nauth:\n  master_key: ${MK}\n")
}

func startGatewayWith(t *testing.T, config string, env ...string) string {
	base, _ := startGatewayFile(t, config, env...)
	return base
}

// startGatewayFile is startGatewayWith that also answers the config
// file's path, for a test that changes it and reloads.
func startGatewayFile(t *testing.T, config string, env ...string) (base, file string) {
	dir := t.TempDir()
	bin := gatewayBinary(t)
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(append(os.Environ(), "MK="+masterKey), env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"addr":"(http://[^"/]+)/mcp"`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	select {
	case u := <-addr:
		return u, cfg
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	return "", ""
}

// mcpPost sends one JSON-RPC message with a key (and session).
func mcpPost(t *testing.T, base, key, sid, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", key)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"console-test-client","version":"1"}}}`

// browser is one headless Chromium tab that records the page's JS errors.
type browser struct {
	t    *testing.T
	ctx  context.Context
	mu   sync.Mutex
	errs []string
	dir  string // screenshots
}

func newBrowser(t *testing.T) *browser {
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (bash scripts/install-test-deps.sh installs Debian's chromium): %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, 900))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	b := &browser{t: t, ctx: ctx, dir: os.Getenv("MCPGATE_SCREENSHOTS")}
	if b.dir == "" {
		b.dir = t.TempDir()
	}
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	listen := func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			b.mu.Lock()
			b.errs = append(b.errs, "exception: "+e.ExceptionDetails.Text+" "+describe(e.ExceptionDetails.Exception))
			b.mu.Unlock()
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, describe(a))
				}
				b.mu.Lock()
				b.errs = append(b.errs, "console.error: "+strings.Join(parts, " "))
				b.mu.Unlock()
			}
		}
	}
	if err := chromedp.Listen(ctx, listen); err != nil {
		t.Fatal(err)
	}
	return b
}

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	if o.Description != "" {
		return o.Description
	}
	return string(o.Value)
}

func (b *browser) jsErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// step runs actions; on failure it saves a screenshot and the JS errors.
func (b *browser) step(name string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	// Do should end with ctx, but a page that navigates in the middle of
	// an action can leave it waiting: the step fails on time regardless.
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx, actions...) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(25 * time.Second):
		err = fmt.Errorf("no answer from the browser within 25 s")
	}
	if err != nil {
		sctx, scancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer scancel()
		png, _ := chromedp.Run(sctx, chromedp.CaptureScreenshot())
		shot := filepath.Join(b.dir, "failed-"+strings.ReplaceAll(name, " ", "-")+".png")
		_ = os.WriteFile(shot, png, 0o644)
		html, _ := chromedp.Run(sctx, chromedp.OuterHTML(chromedp.CSS("main")))
		b.t.Fatalf("step %q: %v\nscreenshot: %s\nJS errors: %q\npage: %.3000s", name, err, shot, b.jsErrors(), html)
	}
	if errs := b.jsErrors(); len(errs) > 0 {
		b.t.Fatalf("step %q: JS errors on the page: %q", name, errs)
	}
}

// shoot saves the page at both widths the console must be readable at.
func (b *browser) shoot(page string) {
	for _, w := range []int64{1280, 390} {
		var png []byte
		b.step("screenshot "+page, chromedp.EmulateViewport(w, 900), chromedp.Sleep(150*time.Millisecond), into(&png, chromedp.CaptureScreenshot()))
		if err := os.WriteFile(filepath.Join(b.dir, fmt.Sprintf("console-%s-%d.png", page, w)), png, 0o644); err != nil {
			b.t.Fatal(err)
		}
	}
	b.step("back to wide", chromedp.EmulateViewport(1280, 900))
}

// into keeps the value of an action that returns one.
func into[T any](p *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, t)
		*p = v
		return chromedp.Void{}, err
	}
}

// set sets a control's value as a person would leave it: the property,
// then the input and change events the page listens to.
func click(css string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("no " + %q); e.click(); return true; })()`, css, css)
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](js)(ctx, t)
		return err
	})
}

func set(css, value string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("no " + %q);
		e.value = %q; e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`, css, css, value)
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](js)(ctx, t)
		return err
	})
}

// x is an XPath query, c a CSS selector.
func x(q string) chromedp.Search { return chromedp.Search(q) }
func c(q string) chromedp.CSS    { return chromedp.CSS(q) }

func byText(tag, text string) chromedp.Search {
	return x(fmt.Sprintf(`//%s[normalize-space(text())=%q]`, tag, text))
}

func rowButton(cell, button string) chromedp.Search {
	return x(fmt.Sprintf(`//tr[td[normalize-space(text())=%q]]//button[normalize-space(text())=%q]`, cell, button))
}

// TestConsole walks an operator's day: sign in, add a server and see it
// ready, create a key, call a tool as that key with a generated form,
// see the audit row (also live), terminate a session, revoke the key
// and see its next call refused; every page at 1280 and 390 pixels.
func TestConsole(t *testing.T) {
	upstream := shop(t)
	base := startGateway(t)
	b := newBrowser(t)

	// Sign in: a wrong key is refused on the page, the master key works.
	b.step("login page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		evalTrue("no nav and no sign out before signing in", `getComputedStyle(document.getElementById("nav")).display === "none" &&
			document.getElementById("signout").getClientRects().length === 0 && document.getElementById("open-banner").getClientRects().length === 0`))
	b.step("wrong key", chromedp.SendKeys(c("#login-key"), "not-a-key-0123456789"), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(x(`//p[@role="alert"]`)))
	b.shoot("login")
	b.step("sign in", set("#login-key", ""), chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(c("#ready-count")))
	var stored string
	b.step("key in session storage only", into(&stored, chromedp.Evaluate[string](`sessionStorage.getItem("mcpgate.key") + "|" + location.href + "|" + document.cookie`)))
	if stored != masterKey+"|"+base+"/ui/#/overview|" {
		t.Errorf("after sign-in: %q (the key belongs in session storage, not the URL or a cookie)", stored)
	}

	// The master key is no person: it has no connections, which is no error.
	b.step("master's connections", chromedp.Navigate(base+"/ui/#/connections"), chromedp.WaitVisible(c("#no-person")),
		chromedp.WaitNotPresent(c(`main [role="alert"]`)))

	// Add a server and see it turn ready.
	b.step("servers page", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(c("#add-server")))
	b.step("add server", chromedp.SendKeys(c("#srv-name"), "shop"), chromedp.SendKeys(c("#srv-url"), upstream+"/mcp"),
		chromedp.Click(c(`#add-server button[type="submit"]`)), chromedp.WaitVisible(x(`//span[@data-state="shop" and text()="ready"]`)))
	b.step("test connection", chromedp.Click(x(`//button[@aria-label="Test connection to shop"]`)),
		chromedp.WaitVisible(x(`//p[@id="test-result" and starts-with(text(), "ok: 2 tools, handshake and list in ")]`)),
		chromedp.WaitVisible(x(`//pre[@aria-label="Request preview" and starts-with(text(), "POST `+upstream+`/mcp")]`)))
	// A runtime server may be removed; it is offered Remove.
	b.step("runtime server removable", chromedp.WaitVisible(rowButton("shop", "Remove")))
	// Hide refund with the server's tool policy.
	b.step("tool policy", chromedp.Click(x(`//button[@aria-label="Tools of shop"]`)), chromedp.WaitVisible(c(`input[data-tool="refund"]`)),
		chromedp.Click(c(`input[data-tool="refund"]`)), chromedp.Click(c("#save-tools")),
		chromedp.WaitVisible(x(`//div[@id="status" and text()="Tool policy of shop saved"]`)))
	var refundShown bool
	b.step("policy saved", chromedp.WaitVisible(c(`input[data-tool="refund"]`)), into(&refundShown, chromedp.Evaluate[bool](`document.querySelector('input[data-tool="refund"]').checked`)))
	if refundShown {
		t.Errorf("refund still visible after the policy was saved")
	}
	// Edit the runtime server: the fields sent change, the rest (the tool
	// policy just saved) stays; the playground below still sees one tool.
	b.step("edit server", chromedp.Click(x(`//button[@aria-label="Edit shop"]`)), chromedp.WaitVisible(c("#edit-srv-timeout")),
		set("#edit-srv-timeout", "30s"), chromedp.Click(c(`#edit-server button[type="submit"]`)),
		chromedp.WaitVisible(x(`//div[@id="status" and text()="Server shop saved"]`)),
		chromedp.WaitVisible(x(`//span[@data-state="shop" and text()="ready"]`)))
	b.shoot("servers")

	// Create a key: its secret is shown once.
	var secret string
	b.step("create key", chromedp.Navigate(base+"/ui/#/keys"), chromedp.WaitVisible(c("#create-key")),
		chromedp.SendKeys(c("#key-alias"), "ci-bot"), chromedp.SendKeys(c("#key-user"), "robin"),
		chromedp.Click(c(`#create-key button[type="submit"]`)), chromedp.WaitVisible(c("#new-secret")), into(&secret, chromedp.Text(c("#new-secret"))),
		chromedp.WaitVisible(rowButton("ci-bot", "Revoke")))
	if !strings.HasPrefix(secret, "mcpg_") {
		t.Fatalf("created key secret %q", secret)
	}
	// Edit its grants: only the shop server.
	b.step("edit key", chromedp.Click(x(`//button[@aria-label="Edit ci-bot"]`)), chromedp.WaitVisible(c("#edit-servers")),
		set("#edit-servers", "shop"), set("#edit-budget", "100"), set("#edit-budget-period", "week"), chromedp.Click(c(`#edit-key button[type="submit"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="ci-bot"]]/td[5][text()="shop"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="ci-bot"]]/td[text()="100 per week"]`)))
	// A team's grant for people who sign in with a company identity.
	b.step("grant", set("#grant-kind", "team"), set("#grant-value", "web"), set("#grant-servers", "shop"),
		chromedp.Click(c(`#put-grant button[type="submit"]`)), chromedp.WaitVisible(x(`//tr[td[text()="team"] and td[text()="web"] and td[text()="shop"]]`)))
	b.shoot("keys")

	// Playground: the catalog as ci-bot sees it, a generated form, a call.
	var out, audit string
	b.step("playground", chromedp.Navigate(base+"/ui/#/playground"), chromedp.WaitReady(x(`//select[@id="pg-key"]/option[@value="ci-bot"]`)),
		set("#pg-key", "ci-bot"), click("#pg-load"),
		chromedp.WaitVisible(x(`//p[@id="pg-count" and starts-with(text(), "1 tools visible to ci-bot")]`)),
		chromedp.WaitVisible(c(`#pg-form input[name="item"]`)))
	b.step("fill form", chromedp.SendKeys(c(`#pg-form input[name="item"]`), "widget"),
		chromedp.SendKeys(c(`#pg-form input[name="qty"]`), "3"),
		set(`#pg-form select[name="size"]`, `"M"`),
		chromedp.Click(c(`#pg-form input[name="gift"]`)),
		chromedp.Click(c(`#pg-form button[data-add="tags"]`)),
		chromedp.SendKeys(c(`#pg-form input[name="tags item 1"]`), "red"),
		chromedp.SendKeys(c(`#pg-form fieldset input[name="city"]`), "Oslo"))
	b.shoot("playground")
	b.step("call", chromedp.Click(c("#pg-call")), chromedp.WaitVisible(c("#pg-output")), into(&out, chromedp.Text(c("#pg-output"))),
		chromedp.WaitVisible(x(`//div[@id="pg-result"]//td[text()="order"]`)), into(&audit, chromedp.Text(c("#pg-result table"))))
	var res struct {
		Content []struct{ Text string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Content) != 1 {
		t.Fatalf("result %q: %v", out, err)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(res.Content[0].Text, "ordered ")), &args); err != nil {
		t.Fatalf("tool saw %q: %v", res.Content[0].Text, err)
	}
	want := `{"gift":true,"item":"widget","qty":3,"ship":{"city":"Oslo"},"size":"M","tags":["red"]}`
	if got, _ := json.Marshal(args); string(got) != want {
		t.Errorf("the form sent %s, want %s", got, want)
	}
	if !strings.Contains(audit, "ci-bot") || !strings.Contains(audit, "robin") || !strings.Contains(audit, "ok") {
		t.Errorf("audit row in the playground: %q", audit)
	}

	// Audit: a live tail shows a call made elsewhere.
	b.step("audit page", chromedp.Navigate(base+"/ui/#/audit"), chromedp.WaitVisible(x(`//td[text()="order"]`)), chromedp.Click(c("#audit-live")))
	code, sid, body := mcpPost(t, base, secret, "", initBody)
	if code != 200 || sid == "" {
		t.Fatalf("initialize as ci-bot: %d %s", code, body)
	}
	if code, _, body := mcpPost(t, base, secret, sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shop__order","arguments":{"item":"bolt"}}}`); code != 200 || !strings.Contains(body, "ordered") {
		t.Fatalf("call as ci-bot: %d %s", code, body)
	}
	b.step("live tail", chromedp.WaitVisible(x(`(//td[text()="order"])[2]`)))
	b.shoot("audit")

	// Overview shows the server with its calls.
	b.step("overview", chromedp.Navigate(base+"/ui/#/overview"), chromedp.WaitVisible(x(`//span[@data-state="shop" and text()="ready"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="shop"]]/td[6][contains(text(), "ms")]`)))
	b.shoot("overview")

	// Sessions: ci-bot's session is listed and terminated.
	b.step("sessions", chromedp.Navigate(base+"/ui/#/sessions"), chromedp.WaitVisible(rowButton("ci-bot", "Terminate")))
	b.shoot("sessions")
	b.step("terminate", chromedp.Click(rowButton("ci-bot", "Terminate")), chromedp.Click(rowButton("ci-bot", "Confirm terminate")),
		chromedp.WaitNotPresent(rowButton("ci-bot", "Terminate")))
	if code, _, body := mcpPost(t, base, secret, sid, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); code != http.StatusNotFound {
		t.Errorf("a terminated session: %d %s, want 404", code, body)
	}

	// Revoke the key: its next call is refused.
	b.step("revoke", chromedp.Navigate(base+"/ui/#/keys"), chromedp.WaitVisible(rowButton("ci-bot", "Revoke")),
		chromedp.Click(rowButton("ci-bot", "Revoke")), chromedp.Click(rowButton("ci-bot", "Confirm revoke")),
		chromedp.WaitNotPresent(rowButton("ci-bot", "Revoke")))
	if code, _, _ := mcpPost(t, base, secret, "", initBody); code != http.StatusUnauthorized {
		t.Errorf("a revoked key: %d, want 401", code)
	}

	// Keyboard: the navigation is reachable with Tab and shows focus.
	var focused string
	b.step("keyboard", chromedp.Navigate(base+"/ui/#/overview"), chromedp.WaitVisible(c("#ready-count")),
		chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := chromedp.Evaluate[any](`document.activeElement.blur()`)(ctx, t)
			return err
		}),
		chromedp.KeyEvent("\t"), chromedp.KeyEvent("\t"),
		into(&focused, chromedp.Evaluate[string](`document.activeElement.textContent + "|" + getComputedStyle(document.activeElement).outlineStyle`)))
	if !strings.HasPrefix(focused, "Overview|") || strings.HasSuffix(focused, "|none") {
		t.Errorf("focused nav link: %q, want Overview with a visible outline", focused)
	}
}

// TestConsoleLogin signs in through mcpgate's own login (auth.login, here
// with keys as the login): the console registers itself, runs the
// authorization code flow with PKCE, and calls the admin API with a token
// whose audience is the admin API, which no MCP route takes. A key that
// is not an admin's signs in to its own connections only.
func TestConsoleLogin(t *testing.T) {
	const (
		ops  = "ops-admin-key-0123456789abcdef"
		dana = "dana-person-key-0123456789abcd"
	)
	base := startGatewayWith(t, `data_dir: ./data
auth:
  master_key: ${MK}
  keys:
    - {alias: ops, key: "${OPS}", user: olga, admin: true}
    - {alias: dana, key: "${DANA}", user: dana}
  login: {keys: true}
vault:
  keys: [{id: k1, key: "${VK}"}]
servers:
  tickets:
    transport: http
    url: http://127.0.0.1:9/mcp
    auth: {type: user_api_key, header_name: X-API-Key}
`, "OPS="+ops, "DANA="+dana, "VK="+base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	b := newBrowser(t)
	b.step("login page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#sso-login")))
	b.step("to the gateway's login", chromedp.Click(c("#sso-login")), chromedp.WaitVisible(c(`input#key`)))
	var page string
	b.step("where", into(&page, chromedp.Evaluate[string](`location.pathname`)))
	if !strings.HasPrefix(page, "/oauth/") {
		t.Fatalf("the sign-in went to %q, want mcpgate's authorization server", page)
	}
	b.step("key as the login", set(`input#key`, ops), chromedp.Click(c(`button[name="login"][value="key"]`)), chromedp.WaitVisible(c("#approve")))
	b.step("consent", chromedp.Click(c("#approve")), chromedp.WaitVisible(c("#ready-count")))
	var stored string
	b.step("token stored", into(&stored, chromedp.Evaluate[string](`JSON.stringify({key: sessionStorage.getItem("mcpgate.key"), token: JSON.parse(sessionStorage.getItem("mcpgate.token")), url: location.href})`)))
	var st struct {
		Key   *string
		Token struct{ Access, Refresh string }
		URL   string
	}
	if err := json.Unmarshal([]byte(stored), &st); err != nil {
		t.Fatal(err)
	}
	if st.Key != nil || strings.Count(st.Token.Access, ".") != 2 || st.Token.Refresh == "" {
		t.Fatalf("after the login: %s (want a JWT and a refresh token, no key)", stored)
	}
	if strings.Contains(st.URL, "code=") {
		t.Errorf("the code stayed in the URL: %s", st.URL)
	}
	// The console's token is the admin API's, not an MCP route's.
	for path, want := range map[string]int{"/admin/v1/keys": 200, "/mcp": 401} {
		method, body := http.MethodGet, ""
		if path == "/mcp" {
			method, body = http.MethodPost, initBody
		}
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+st.Token.Access)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("the console's token on %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	b.step("admin pages", chromedp.Navigate(base+"/ui/#/keys"), chromedp.WaitVisible(x(`//td[text()="ops"]`)))

	// A person's key: only their connections.
	b.step("sign out", click("#signout"), chromedp.WaitVisible(c("#login-key")))
	b.step("person login", set("#login-key", dana), click(`#login-form button[type="submit"]`), chromedp.WaitVisible(byText("h1", "My connections")))
	var links string
	b.step("person nav", chromedp.Navigate(base+"/ui/#/keys"), chromedp.WaitVisible(byText("h1", "My connections")),
		into(&links, chromedp.Evaluate[string](`[...document.querySelectorAll("nav a")].filter(a => !a.hidden).map(a => a.textContent).join(",")`)))
	if links != "My connections" {
		t.Errorf("a person sees the pages %q, want only My connections", links)
	}
	// dana stores her own credential for tickets; the page says so.
	b.step("own credential", chromedp.WaitVisible(x(`//span[@data-connected="tickets" and text()="not connected"]`)),
		set(`input[data-credential="tickets"]`, "dana-upstream-secret"), chromedp.Click(c(`button[data-save="tickets"]`)),
		chromedp.WaitVisible(x(`//span[@data-connected="tickets" and text()="connected"]`)))
	b.shoot("connections")
}
