// Package console_test drives the web console (/ui) of the real mcpgate
// binary in headless Chromium (Debian's chromium package, installed by
// scripts/install-test-deps.sh) over the DevTools protocol with chromedp.
// A failing step saves a screenshot and the page's JS errors in the test
// output; any JS error fails the test.
package console_test

import (
	"bufio"
	"context"
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
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// startGateway builds and runs mcpgate serve on a fresh SQLite store.
func startGateway(t *testing.T) string {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mcpgate")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/mcpgate").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte("data_dir: ./data\nauth:\n  master_key: ${MK}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	cmd.Env = append(os.Environ(), "MK="+masterKey)
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
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("gateway did not start")
	}
	return ""
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
	if err := chromedp.Do(ctx, actions...); err != nil {
		png, _ := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		shot := filepath.Join(b.dir, "failed-"+strings.ReplaceAll(name, " ", "-")+".png")
		_ = os.WriteFile(shot, png, 0o644)
		html, _ := chromedp.Run(b.ctx, chromedp.OuterHTML(chromedp.CSS("main")))
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
	b.step("login page", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")))
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

	// Add a server and see it turn ready.
	b.step("servers page", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(c("#add-server")))
	b.step("add server", chromedp.SendKeys(c("#srv-name"), "shop"), chromedp.SendKeys(c("#srv-url"), upstream+"/mcp"),
		chromedp.Click(c(`#add-server button[type="submit"]`)), chromedp.WaitVisible(x(`//span[@data-state="shop" and text()="ready"]`)))
	b.step("test connection", chromedp.Click(x(`//button[@aria-label="Test connection to shop"]`)),
		chromedp.WaitVisible(x(`//p[@id="test-result" and starts-with(text(), "1 tools")]`)))
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
	b.step("connections page", chromedp.Navigate(base+"/ui/#/connections"), chromedp.WaitVisible(byText("h1", "My connections")))
	b.shoot("connections")

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
