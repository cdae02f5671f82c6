package authserver

import (
	"net/http"
	"strings"
	"testing"
)

// A confirmation runs the IdP's login for a page of the gateway's own and
// comes back with a one-time code naming the person; nothing is issued
// to a client. Without an IdP there is nothing to confirm with.
func TestConfirm(t *testing.T) {
	h := newHarness(t)
	back := h.url + "/back?elicitation=e1"
	mux := http.NewServeMux()
	mux.HandleFunc("/start", func(w http.ResponseWriter, r *http.Request) {
		if err := h.srv.Confirm(w, r, back); err != nil {
			t.Errorf("Confirm: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	mux.Handle("/", h.srv.Handler())
	var hh http.Handler = mux
	h.handler.Store(&hh)

	if !h.srv.CanConfirm() {
		t.Fatal("CanConfirm with an IdP")
	}
	b := newBrowser(t, h.url+"/back")
	p := b.Get(h.url + "/start")
	if p.Location == nil || !strings.HasPrefix(p.Location.String(), h.url+"/back?") {
		t.Fatalf("not sent back to the page: %d %v\n%s", p.Status, p.Location, p.Body)
	}
	if p.Location.Query().Get("elicitation") != "e1" {
		t.Errorf("the page's own query was lost: %v", p.Location)
	}
	code := p.Location.Query().Get(ConfirmParam)
	if code == "" || p.Location.Query().Get("code") != "" {
		t.Fatalf("no confirmation code (or an authorization code): %v", p.Location)
	}
	c, ok := h.srv.Confirmed(code)
	if !ok || c.IdPIssuer != h.idp.issuer() || c.IdPSubject != "u-123" || c.Issuer != h.url || !strings.HasSuffix(c.Subject, ":u-123") {
		t.Fatalf("Confirmed = %+v, %v", c, ok)
	}
	if _, ok := h.srv.Confirmed(code); ok {
		t.Error("a confirmation code redeemed twice")
	}
	if _, ok := h.srv.Confirmed("made-up"); ok {
		t.Error("a made-up code redeemed")
	}

	// The IdP's answer in another browser is refused.
	b2 := newBrowser(t, h.url+"/back")
	b2.StopAt = h.idp.issuer()
	start := b2.Get(h.url + "/start")
	if start.Location == nil {
		t.Fatalf("no redirect to the IdP: %d", start.Status)
	}
	b2.StopAt = h.url + "/oauth/callback"
	cb := b2.Get(start.Location.String())
	if cb.Location == nil {
		t.Fatalf("the IdP did not send the browser back: %d", cb.Status)
	}
	if p := newBrowser(t, h.url+"/back").Get(cb.Location.String()); p.Status != http.StatusBadRequest || p.Location != nil {
		t.Errorf("the callback in another browser: %d %v", p.Status, p.Location)
	}

	if (&Server{}).CanConfirm() {
		t.Error("CanConfirm without an IdP")
	}
	noIdP := newHarness(t, withoutIdP(), withStoreKeys())
	if noIdP.srv.CanConfirm() {
		t.Error("CanConfirm with key login only")
	}
}
