package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// do sends one request to the gateway, with no credential unless key is
// set: the quickstart's gateway has no keys, and its admin API answers
// callers on loopback (this test) without one.
func do(t *testing.T, method, url, key, sid, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	if key != "" {
		req.Header.Set("X-Mcpgate-Api-Key", key)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// callTools makes n tools/call of tool with args as key ("" anonymous) in
// one session.
func callTools(t *testing.T, base, key, tool, args string, n int) {
	t.Helper()
	code, hdr, body := do(t, http.MethodPost, base+"/mcp", key, "", initBody)
	sid := hdr.Get("Mcp-Session-Id")
	if code != 200 || sid == "" {
		t.Fatalf("initialize as %q: %d %s", key, code, body)
	}
	do(t, http.MethodPost, base+"/mcp", key, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for i := range n {
		if code, _, body := do(t, http.MethodPost, base+"/mcp", key, sid,
			fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, i+2, tool, args)); code != 200 {
			t.Fatalf("call %s as %q: %d %s", tool, key, code, body)
		}
	}
}

// waitAudit waits until the audit log holds n tool calls (the records
// are written through a queue).
func waitAudit(t *testing.T, base string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, body := do(t, http.MethodGet, base+"/admin/v1/audit?limit=1000", "", "", "")
		var page struct{ Calls []json.RawMessage }
		_ = json.Unmarshal([]byte(body), &page)
		if len(page.Calls) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log holds %d tool calls, want %d: %.300s", len(page.Calls), n, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// evalTrue fails the step unless js evaluates to true.
func evalTrue(what, js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		ok, err := chromedp.Evaluate[bool](js)(ctx, t)
		if err == nil && !ok {
			err = fmt.Errorf("%s: %s is false", what, js)
		}
		return err
	})
}

// fitsNarrow checks at 390 px that nothing on the page reaches past the
// screen's right edge: no visible button, link or field, and no page
// wider than the screen.
const fitsNarrow = `(() => innerWidth <= 400 && document.documentElement.scrollWidth <= innerWidth &&
  [...document.querySelectorAll("main button, main a, main input, main select, nav a")].filter(e => e.getClientRects().length)
    .every(e => e.getBoundingClientRect().right <= innerWidth + 0.5))()`

// TestConsoleQuickstart is a newcomer's first five minutes on the
// quickstart's kind of gateway (no keys, loopback only): the gateway's
// root in a browser opens the console, no key asked; the overview charts
// the last hour of real calls recorded in SQLite per server; the usage
// page charts cost and calls per key; toolsets, admin events and reload
// have pages; a key's every field is edited; config-file servers offer
// no Remove; every page fits 390 px. Screenshots of every page at 1280
// and 390 px (MCPGATE_SCREENSHOTS=dir keeps them: scripts/console-screenshots.sh).
func TestConsoleQuickstart(t *testing.T) {
	upstream := shop(t)
	base, file := startGatewayFile(t, fmt.Sprintf(`data_dir: ./data
servers:
  shop:
    transport: http
    url: %s/mcp
    tools:
      costs: {order: 0.25}
`, upstream))

	// A browser opening the root is sent to the console.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "ui/" {
		t.Fatalf("GET / from a browser: %d %q, want 302 to ui/", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Real calls, anonymous (as the quickstart's clients make them): the
	// audit log in SQLite records them.
	callTools(t, base, "", "shop__order", `{"item":"widget"}`, 6)
	callTools(t, base, "", "shop__refund", `{}`, 3)
	waitAudit(t, base, 9)

	b := newBrowser(t)
	b.step("root opens the console without a key", chromedp.Navigate(base+"/"), chromedp.WaitVisible(c("#ready-count")),
		chromedp.WaitVisible(c("#open-banner")), evalTrue("no sign out without a sign-in", `document.getElementById("signout").getClientRects().length === 0`),
		evalTrue("no key stored", `sessionStorage.getItem("mcpgate.key") === null && location.pathname === "/ui/"`))

	// The overview charts the last hour per server from the audit store.
	b.step("overview charts", chromedp.WaitVisible(c(`#chart-rate path[data-series="shop"]`)),
		chromedp.WaitVisible(c(`#chart-p50 [data-series="shop"], #chart-p50 circle`)),
		chromedp.WaitVisible(c(`#chart-p99 svg`)), chromedp.WaitVisible(c(`#chart-errors svg`)),
		chromedp.WaitVisible(x(`//figure[@id="chart-rate"]//ul[@class="legend"]/li[text()="shop"]`)))
	var top string
	b.step("rate axis", into(&top, chromedp.Evaluate[string](`[...document.querySelectorAll("#chart-rate text.axis")].map(e => e.textContent).join("|")`)))
	if !strings.HasPrefix(top, "0|") || strings.Contains(top, "NaN") || strings.Contains(top, "undefined") {
		t.Errorf("calls/s axis labels %q", top)
	}
	b.shoot("overview")

	// Servers: a config-file server can be tested but not removed; the
	// test shows the request the gateway sends, with its method and URL.
	b.step("servers", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(x(`//span[@data-state="shop" and text()="ready"]`)),
		chromedp.WaitVisible(c(`span[data-source="shop"]`)), chromedp.WaitNotPresent(rowButton("shop", "Remove")))
	var preview string
	b.step("test connection", click(`button[aria-label="Test connection to shop"]`),
		chromedp.WaitVisible(x(`//p[@id="test-result" and starts-with(text(), "ok: 2 tools")]`)),
		into(&preview, chromedp.Text(c(`pre[aria-label="Request preview"]`))))
	if !strings.HasPrefix(preview, "POST "+upstream+"/mcp\n") || strings.Contains(preview, "null") || strings.Contains(preview, "undefined") {
		t.Errorf("request preview %q", preview)
	}
	b.shoot("servers")

	// Keys: a key is created, then every field edited on the form.
	b.step("create key", chromedp.Navigate(base+"/ui/#/keys"), chromedp.WaitVisible(c("#create-key")),
		set("#key-alias", "ci-bot"), set("#key-user", "robin"), set("#key-team", "web"),
		click(`#create-key button[type="submit"]`), chromedp.WaitVisible(c("#new-secret")), chromedp.WaitVisible(rowButton("ci-bot", "Edit")))
	var secret string
	b.step("secret", into(&secret, chromedp.Text(c("#new-secret"))))
	b.step("edit key", click(`button[aria-label="Edit ci-bot"]`), chromedp.WaitVisible(c("#edit-tools")),
		set("#edit-servers", "shop"), set("#edit-tools", "shop: order, refund"), set("#edit-deny-tools", "shop: refund"),
		set("#edit-cidrs", "127.0.0.0/8, ::1/128"), set("#edit-expires", "2099-06-01T12:00"), set("#edit-rpm", "120"),
		set("#edit-budget", "50"), set("#edit-budget-period", "day"), set("#edit-team", "ops"))
	b.shoot("key-edit")
	b.step("save key", click(`#edit-key button[type="submit"]`), chromedp.WaitVisible(x(`//div[@id="status" and text()="Key ci-bot saved"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="ci-bot"]]/td[text()="50 per day"]`)))
	code, _, body := do(t, http.MethodGet, base+"/admin/v1/keys/ci-bot", "", "", "")
	var k struct {
		Team         string              `json:"team"`
		Servers      []string            `json:"servers"`
		Tools        map[string][]string `json:"tools"`
		DenyTools    map[string][]string `json:"deny_tools"`
		AllowedCIDRs []string            `json:"allowed_cidrs"`
		Expires      string              `json:"expires"`
		RateLimitRPM int                 `json:"rate_limit_rpm"`
	}
	if err := json.Unmarshal([]byte(body), &k); code != 200 || err != nil {
		t.Fatalf("GET key: %d %s", code, body)
	}
	exp, _ := time.Parse(time.RFC3339, k.Expires)
	if k.Team != "ops" || fmt.Sprint(k.Servers) != "[shop]" || fmt.Sprint(k.Tools) != "map[shop:[order refund]]" || fmt.Sprint(k.DenyTools) != "map[shop:[refund]]" ||
		fmt.Sprint(k.AllowedCIDRs) != "[127.0.0.0/8 ::1/128]" || exp.Year() != 2099 || k.RateLimitRPM != 120 {
		t.Errorf("the key after the edit: %s", body)
	}
	b.step("edit again shows the fields", click(`button[aria-label="Edit ci-bot"]`), chromedp.WaitVisible(c("#edit-tools")),
		evalTrue("fields shown", `document.getElementById("edit-tools").value === "shop: order, refund" && document.getElementById("edit-deny-tools").value === "shop: refund" &&
			document.getElementById("edit-cidrs").value === "127.0.0.0/8, ::1/128" && document.getElementById("edit-expires").value.startsWith("2099-06-01") &&
			!document.getElementById("edit-no-expiry").checked`))
	b.shoot("keys")

	// The expiry is removed with "No expiry" (the form sends null); the
	// other fields stay, and the form then shows no expiry.
	b.step("remove the expiry", click("#edit-no-expiry"), evalTrue("the date is emptied", `document.getElementById("edit-expires").value === ""`),
		evalTrue("the status is cleared", `(document.getElementById("status").textContent = "", true)`),
		click(`#edit-key button[type="submit"]`), chromedp.WaitVisible(x(`//div[@id="status" and text()="Key ci-bot saved"]`)),
		// The status shows before the key list is fetched again, and an Edit
		// button of the list before that fills the form from the key as it
		// was: the next step clicks one of the list fetched after the save
		// (its Expires cell empty).
		chromedp.WaitVisible(x(`//tr[td[text()="ci-bot"] and td[@data-label="Expires" and not(normalize-space())]]//button[@aria-label="Edit ci-bot"]`)))
	code, _, body = do(t, http.MethodGet, base+"/admin/v1/keys/ci-bot", "", "", "")
	k.Expires = "" // the answer omits an absent expiry
	if err := json.Unmarshal([]byte(body), &k); code != 200 || err != nil || k.Expires != "" || k.Team != "ops" ||
		fmt.Sprint(k.AllowedCIDRs) != "[127.0.0.0/8 ::1/128]" || k.RateLimitRPM != 120 {
		t.Errorf("the key after removing its expiry: %d %s", code, body)
	}
	b.step("edit shows no expiry", click(`button[aria-label="Edit ci-bot"]`), chromedp.WaitVisible(c("#edit-tools")),
		evalTrue("no expiry shown", `document.getElementById("edit-no-expiry").checked && document.getElementById("edit-expires").value === ""`))

	// Another admin changes the key while this page shows its list (drawn
	// with a limit of 120): Edit fills the form from the key as it is now.
	if code, _, body := do(t, http.MethodPatch, base+"/admin/v1/keys/ci-bot", "", "", `{"rate_limit_rpm":240}`); code != 200 {
		t.Fatalf("PATCH the key behind the page: %d %s", code, body)
	}
	b.step("edit shows the key as it is now", evalTrue("the form is closed", `(document.getElementById("key-edit").replaceChildren(), true)`),
		click(`button[aria-label="Edit ci-bot"]`), chromedp.WaitVisible(c("#edit-rpm")),
		evalTrue("the limit set behind the page", `document.getElementById("edit-rpm").value === "240" && document.getElementById("edit-team").value === "ops"`))

	// Usage: calls as ci-bot (priced) and anonymous ones, per key.
	callTools(t, base, secret, "shop__order", `{"item":"bolt"}`, 2)
	waitAudit(t, base, 11)
	b.step("usage", chromedp.Navigate(base+"/ui/#/usage"), chromedp.WaitVisible(c(`#chart-cost rect[data-series="ci-bot"]`)),
		chromedp.WaitVisible(c(`#chart-calls rect[data-series="(no key)"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="ci-bot"]]/td[text()="2"]/following-sibling::td[text()="0.5"]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="(no key)"]]/td[text()="9"]`)))
	b.step("usage per team", set("#usage-by", "team"), chromedp.WaitVisible(c(`#chart-calls rect[data-series="ops"]`)))
	b.shoot("usage")

	// Toolsets: one is made, shown and removed.
	b.step("toolsets", chromedp.Navigate(base+"/ui/#/toolsets"), chromedp.WaitVisible(c("#put-toolset")),
		set("#ts-name", "orders"), set("#ts-servers", "shop: order"), click(`#put-toolset button[type="submit"]`),
		chromedp.WaitVisible(x(`//tr[td[text()="orders"] and td[text()="shop: order"]]`)))
	b.shoot("toolsets")
	b.step("remove toolset", chromedp.Click(rowButton("orders", "Remove")), chromedp.Click(rowButton("orders", "Confirm remove")),
		chromedp.WaitNotPresent(x(`//td[text()="orders"]`)))

	// Admin events: what was done above, newest first.
	b.step("events", chromedp.Navigate(base+"/ui/#/events"), chromedp.WaitVisible(x(`//tr[td[text()="key.create"] and td[text()="ci-bot"] and td[text()="anonymous"]]`)),
		chromedp.WaitVisible(x(`//tr[td[text()="toolset.delete"] and td[text()="orders"]]`)))
	b.shoot("events")

	// Reload: an unchanged file, then a broken one, whose problem is named
	// and which changes nothing.
	b.step("reload", chromedp.Navigate(base+"/ui/#/reload"), click("#reload-go"),
		chromedp.WaitVisible(x(`//p[@id="reload-result" and text()="Reloaded: nothing changed."]`)),
		chromedp.WaitVisible(x(`//td[text()="config.reload"]`)))
	b.shoot("reload")
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(orig, []byte("    timout: 5s\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	b.step("reload a broken file", click("#reload-go"), chromedp.WaitVisible(x(`//p[@role="alert"]`)),
		chromedp.WaitVisible(x(`//table[caption[text()="Problems in the config file"]]//td[contains(text(), "timout")]`)),
		chromedp.WaitVisible(x(`//td[text()="config.reload_failed"]`)))

	// The other pages, for their pictures; "My connections" is no error
	// for an open gateway's anonymous caller.
	b.step("connections", chromedp.Navigate(base+"/ui/#/connections"), chromedp.WaitVisible(c("#no-person")),
		chromedp.WaitNotPresent(c(`main [role="alert"]`)))
	b.step("audit", chromedp.Navigate(base+"/ui/#/audit"), chromedp.WaitVisible(x(`//td[text()="refund"]`)))
	b.shoot("audit")
	b.step("sessions", chromedp.Navigate(base+"/ui/#/sessions"), chromedp.WaitVisible(rowButton("ci-bot", "Terminate")))
	b.shoot("sessions")
	b.step("playground", chromedp.Navigate(base+"/ui/#/playground"), chromedp.WaitReady(x(`//select[@id="pg-key"]/option[@value="ci-bot"]`)),
		click("#pg-load"), chromedp.WaitVisible(c(`#pg-form input[name="item"]`)), set(`#pg-form input[name="item"]`, "widget"),
		click("#pg-call"), chromedp.WaitVisible(c("#pg-output")))
	b.shoot("playground")

	// At 390 px every page's rows, buttons and fields are on screen.
	b.step("narrow", chromedp.EmulateViewport(390, 900))
	for _, page := range []string{"overview", "servers", "keys", "toolsets", "playground", "sessions", "audit", "usage", "events", "reload", "connections"} {
		b.step("narrow "+page, chromedp.Navigate(base+"/ui/#/"+page), chromedp.WaitVisible(c("main h1")), chromedp.Sleep(700*time.Millisecond),
			evalTrue(page+" fits 390 px", fitsNarrow))
	}
	b.step("narrow servers rows", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(c(`button[aria-label="Test connection to shop"]`)),
		evalTrue("row buttons on screen", fitsNarrow))
	b.step("wide", chromedp.EmulateViewport(1280, 900))
}
