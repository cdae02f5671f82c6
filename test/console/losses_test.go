package console_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A loss shows on the console, not only in /metrics and the log: the
// overview's losses card says nothing was lost, and once an audit
// exporter whose endpoint never answers has overflowed its one-record
// queue, how many records it dropped and by which exporter: the count
// /metrics gives.
func TestConsoleShowsLosses(t *testing.T) {
	sink := hangingSink(t)
	base := startGatewayWith(t, fmt.Sprintf(`data_dir: ./data
auth:
  master_key: ${MK}
audit:
  export:
    - {type: webhook, name: siem, url: %s, batch: 1, queue_size: 1, flush_interval: 50ms, timeout: 60s}
servers:
  shop: {transport: http, url: %s}
`, sink, shop(t)))
	b := newBrowser(t)
	b.step("sign in; nothing lost yet", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(c("#login-key")),
		chromedp.SendKeys(c("#login-key"), masterKey), chromedp.Click(c(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(x(`//div[@id="losses"]/b[@id="loss-count" and normalize-space()="0"]`)))

	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"shop__order","arguments":{"item":"bolt"}}}`
	for range 6 {
		if code, _, body := mcpPost(t, base, masterKey, "", call); code != http.StatusOK {
			t.Fatalf("call: %d %s", code, body)
		}
	}
	// The exporter holds one record in its stuck request and one in its
	// queue; the rest are dropped, and the count settles.
	dropped := settledExportDrops(t, base, "siem")
	if dropped < 3 {
		t.Fatalf("the exporter dropped %d of 6 records, want at least 3 (one sent, one queued)", dropped)
	}
	lost := x(fmt.Sprintf(`//div[@id="losses" and contains(normalize-space(), "lost since start: %d records dropped by exporter siem")]/b[@id="loss-count" and normalize-space()="%d"]`, dropped, dropped))
	b.step("the overview names the dropped records", chromedp.WaitVisible(lost))
}

// hangingSink is a webhook endpoint that takes requests and never
// answers (until the test ends): a stalled log collector.
func hangingSink(t *testing.T) string {
	done := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(done) }) // first: Close waits for the handlers
	return ts.URL
}

// settledExportDrops reads mcpgate_audit_export_dropped_total of exporter
// from /metrics until two reads half a second apart agree.
func settledExportDrops(t *testing.T, base, exporter string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^mcpgate_audit_export_dropped_total\{exporter="` + regexp.QuoteMeta(exporter) + `"\} (\d+)$`)
	read := func() int {
		_, _, b := do(t, http.MethodGet, base+"/metrics", masterKey, "", "")
		m := re.FindStringSubmatch(b)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	last := read()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		n := read()
		if n == last && n > 0 {
			return n
		}
		last = n
	}
	t.Fatalf("mcpgate_audit_export_dropped_total{exporter=%q} did not settle above 0: last %d", exporter, last)
	return 0
}
