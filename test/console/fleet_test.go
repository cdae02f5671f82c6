package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mcpgate/mcpgate/internal/admin"
	"github.com/mcpgate/mcpgate/internal/relay"
	"github.com/mcpgate/mcpgate/internal/state/redis"
	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// An admin change some replica of a fleet did not confirm in time is made
// and said so on the console, apart from the status line: here a replica
// that hears admin changes and never confirms one (stuck, or of a version
// before confirmations) is a bare subscriber of the bus. The change is
// answered after the 2 s wait, with X-Mcpgate-Unconfirmed, and the
// console shows the warning until it is dismissed.
func TestConsoleWarnsOfUnconfirmedChange(t *testing.T) {
	srv := redistest.New(t)
	base := startGatewayWith(t, "data_dir: ./data\nauth:\n  master_key: ${MK}\nstate: {driver: redis, url: '"+srv.URL()+"'}\n"+
		"servers:\n  shop:\n    transport: http\n    url: "+shop(t)+"\n")
	var secret string
	for _, alias := range []string{"first", "second", "third"} {
		code, _, body := do(t, "POST", base+"/admin/v1/keys", masterKey, "", `{"alias":"`+alias+`","servers":["shop"]}`)
		if code != http.StatusCreated {
			t.Fatalf("create key %s: %d %s", alias, code, body)
		}
		var k struct{ Key string }
		if err := json.Unmarshal([]byte(body), &k); err != nil {
			t.Fatal(err)
		}
		secret = k.Key
	}
	b := newBrowser(t)
	b.step("sign in; revoke a key every replica confirms: no warning", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(c("#ready-count")), chromedp.Navigate(base+"/ui/#/keys"),
		chromedp.WaitVisible(rowButton("first", "Revoke")),
		chromedp.Click(rowButton("first", "Revoke")), chromedp.Click(rowButton("first", "Confirm revoke")),
		chromedp.WaitNotPresent(rowButton("first", "Revoke")),
		evalTrue("no warning shown", `document.getElementById("warning").textContent === ""`))

	bus, err := redis.Open(redis.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Close() })
	subscribeSilently(t, bus, admin.TopicChanges)
	warning := x(`//div[@id="warning" and contains(., "this change was not confirmed by every replica within 2 s")]`)
	b.step("revoke a key with a silent replica: revoked, and the warning says it was not confirmed",
		chromedp.Click(rowButton("second", "Revoke")), chromedp.Click(rowButton("second", "Confirm revoke")),
		chromedp.WaitNotPresent(rowButton("second", "Revoke")), chromedp.WaitVisible(warning))
	b.step("the warning stays until dismissed",
		chromedp.Click(x(`//div[@id="warning"]//button[normalize-space()="Dismiss"]`)), chromedp.WaitNotPresent(warning))

	// A session ended while a replica that hears terminations never
	// confirms: the termination's own count, shown the same way.
	code, sid, body := mcpPost(t, base, secret, "", initBody)
	if code != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %q %s", code, sid, body)
	}
	if code, _, body := mcpPost(t, base, secret, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	subscribeSilently(t, bus, relay.TopicTerminated)
	ended := x(`//div[@id="warning" and contains(., "1 of the 1 session(s) terminated not confirmed ended by every replica within 2 s")]`)
	b.step("terminate a session with a silent replica: ended, and the warning says it was not confirmed",
		chromedp.Navigate(base+"/ui/#/sessions"), chromedp.WaitVisible(rowButton("third", "Terminate")),
		chromedp.Click(rowButton("third", "Terminate")), chromedp.Click(rowButton("third", "Confirm terminate")),
		chromedp.WaitNotPresent(rowButton("third", "Terminate")), chromedp.WaitVisible(ended))
}

// subscribeSilently subscribes to topic on bus, reading nothing: a
// replica that hears what is published there and never confirms it.
func subscribeSilently(t *testing.T, bus *redis.Backend, topic string) {
	t.Helper()
	sub, err := bus.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
}
