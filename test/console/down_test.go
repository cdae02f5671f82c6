package console_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Issue 24 §1: an outage shows on the console. A server whose port is
// closed is "down since <time> (unreachable)" on the overview and the
// servers page, and the calls failing on it count in its error rate
// (which said "–" when failed calls were not counted).
func TestConsoleShowsDownServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	base := startGatewayWith(t, "data_dir: ./data\nauth:\n  master_key: ${MK}\nservers:\n  gone: {transport: http, url: http://"+closed+"/mcp}\n")
	b := newBrowser(t)
	b.step("sign in", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(c("#ready-count")))
	downSince := x(`//span[@data-state="gone" and starts-with(text(), "down since ") and contains(text(), "(unreachable)")]`)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gone__search","arguments":{}}}`
	// Calls keep failing while the overview samples its rates (every 2 s).
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if code, _, body := mcpPost(t, base, masterKey, "", call); code != 200 || !strings.Contains(body, `"fault":"unreachable"`) {
				t.Errorf("a call of the down server: %d %s", code, body)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	errRate := x(`//tr[td[1][normalize-space()="gone"]]/td[count(//th[normalize-space()="Error rate"]/preceding-sibling::th) + 1][normalize-space()="100.0%"]`)
	b.step("overview shows down since and the error rate", chromedp.Navigate(base+"/ui/#/overview"), chromedp.WaitVisible(downSince), chromedp.WaitVisible(errRate))
	b.step("servers page shows down since", chromedp.Navigate(base+"/ui/#/servers"), chromedp.WaitVisible(downSince))
}
