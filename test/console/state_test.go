package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/mcpgate/mcpgate/internal/state/redis/redistest"
)

// A shared state outage shows on the console: with the redis driver the
// overview has a "shared state (redis)" card that says ok, and once Redis
// stops, "degraded since <time>" (the replica serves on meanwhile, as
// /readyz and mcpgate_state_up say).
func TestConsoleShowsSharedStateOutage(t *testing.T) {
	srv := redistest.New(t)
	base := startGatewayWith(t, "data_dir: ./data\nauth:\n  master_key: ${MK}\nstate: {driver: redis, url: '"+srv.URL()+"'}\n")
	b := newBrowser(t)
	ok := x(`//b[@id="state-status" and normalize-space()="ok"]/parent::div[contains(., "shared state (redis)")]`)
	b.step("sign in; the overview shows the shared state ok", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(c("#ready-count")), chromedp.WaitVisible(ok))
	srv.Stop()
	degraded := x(`//b[@id="state-status" and starts-with(normalize-space(), "degraded since ")]`)
	b.step("the overview shows it degraded once Redis stops", chromedp.WaitVisible(degraded))
}
