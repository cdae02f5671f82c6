package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// fakeRoutes is a RouteNamer over a fixed table: path -> words.
type fakeRoutes map[string]string

func (f fakeRoutes) NameRoute(path string) (string, bool) {
	w, ok := f[path]
	return w, ok
}

// fakeAdmins is an AdminChecker answering isAdmin.
type fakeAdmins struct {
	isAdmin func(oauth.Identity) (bool, error)
}

func (f fakeAdmins) IsAdmin(_ context.Context, p oauth.Identity) (bool, error) { return f.isAdmin(p) }

func withRoutes(r RouteNamer) harnessOpt { return func(o *Options, h *harness) { o.Routes = r } }

func withAdmins(a AdminChecker) harnessOpt { return func(o *Options, h *harness) { o.Admins = a } }

// authorizeFor starts an authorization for resource ("" = none named)
// and returns the page the browser ends on and the request's state.
func (h *harness) authorizeFor(b *browser, clientID string, pk pkce, resource string) (*page, string) {
	h.t.Helper()
	state := "st-" + randomToken(8)
	p := b.Get(h.authorizeURL(clientID, redirect, pk, url.Values{"state": {state}, "resource": {resource}}))
	return p, state
}

// redeemFor redeems a code naming resource ("" = none).
func (h *harness) redeemFor(clientID, code string, pk pkce, resource string) tokenReply {
	h.t.Helper()
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {clientID}, "code": {code},
		"redirect_uri": {redirect}, "code_verifier": {pk.verifier}}
	if resource != "" {
		form.Set("resource", resource)
	}
	return h.token(form)
}

// wantConsentFor checks that p is the consent page and that it names the
// resource in words and as a URL.
func wantConsentFor(t *testing.T, p *page, words, resource string) {
	t.Helper()
	if p.Location != nil || p.Status != http.StatusOK || !strings.Contains(p.Body, `name="decision"`) {
		t.Fatalf("want the consent page for %s; got status %d, location %v:\n%s", resource, p.Status, p.Location, p.Body)
	}
	body := html.UnescapeString(p.Body)
	if !strings.Contains(body, `<strong id="resource">`+words+`</strong>`) || !strings.Contains(body, `<code id="resource-url">`+resource+`</code>`) {
		t.Errorf("the consent page does not name %q (%s):\n%s", words, resource, p.Body)
	}
}

// TestAuthorizeWithoutResource: a request that names no resource is bound
// to the gateway's /mcp, and its tokens to that one route: never to the
// issuer, whose audience the verifier used to take on every route and
// on the admin API.
func TestAuthorizeWithoutResource(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{ClientName: "No Resource", RedirectURIs: []string{redirect}})
	b := newBrowser(t, redirect)
	pk := newPKCE()
	p, state := h.authorizeFor(b, reg.ClientID, pk, "")
	wantConsentFor(t, p, "the MCP server at "+h.url+"/mcp", h.url+"/mcp")
	code := h.codeFrom(h.approve(b, p), state)
	// The code is for /mcp: naming the issuer at the token endpoint is
	// another resource, and the code is not spent by that refusal.
	wantError(t, h.redeemFor(reg.ClientID, code, pk, h.url), http.StatusBadRequest, "invalid_target")
	r := h.redeemFor(reg.ClientID, code, pk, "")
	wantTokens(t, r)
	if aud := audience(t, h, r.AccessToken); !slices.Equal(aud, []string{h.url + "/mcp"}) {
		t.Errorf("aud = %v, want [%s/mcp]", aud, h.url)
	}
	r2 := h.refresh(reg.ClientID, r.RefreshToken)
	wantTokens(t, r2)
	if aud := audience(t, h, r2.AccessToken); !slices.Equal(aud, []string{h.url + "/mcp"}) {
		t.Errorf("refreshed aud = %v, want [%s/mcp]", aud, h.url)
	}
}

// TestConsentPerResource is hole 2 of issue 22: a client a person
// approved for /mcp/alpha asked for the admin API and got a code with no
// consent page. Consent is per person, client and resource; the page
// names the resource; the admin API is asked for every time, with a
// warning that says what it gives an administrator.
func TestConsentPerResource(t *testing.T) {
	routes := fakeRoutes{"/mcp/alpha": "the MCP server alpha", "/mcp/beta": "the MCP server beta"}
	var mu sync.Mutex
	var asked []string
	admins := fakeAdmins{isAdmin: func(p oauth.Identity) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, p.User)
		return p.User == "ada", nil
	}}
	h := newHarness(t, withRoutes(routes), withAdmins(admins))
	reg := h.register(oauth.ClientMetadata{ClientName: "Some MCP Client", RedirectURIs: []string{redirect}})
	b := newBrowser(t, redirect)
	alpha, beta, admin := h.url+"/mcp/alpha", h.url+"/mcp/beta", h.url+"/admin/v1"

	// alpha: asked once, then remembered.
	pk := newPKCE()
	p, state := h.authorizeFor(b, reg.ClientID, pk, alpha)
	wantConsentFor(t, p, "the MCP server alpha at "+alpha, alpha)
	if strings.Contains(p.Body, `id="admin-warning"`) {
		t.Error("the consent page for an MCP route warns about the admin API")
	}
	alphaTok := h.redeemFor(reg.ClientID, h.codeFrom(h.approve(b, p), state), pk, alpha)
	wantTokens(t, alphaTok)
	pk = newPKCE()
	p, state = h.authorizeFor(b, reg.ClientID, pk, alpha)
	wantTokens(t, h.redeemFor(reg.ClientID, h.codeFrom(p, state), pk, alpha))

	// The same client, the admin API: the page, naming it, with the
	// administrator warning, however the admin API is spelt.
	for _, spelling := range []string{admin, strings.Replace(admin, "http://", "HTTP://", 1) + "/"} {
		pk = newPKCE()
		p, state = h.authorizeFor(b, reg.ClientID, pk, spelling)
		wantConsentFor(t, p, "the admin API of mcpgate at "+h.url, admin)
		if !strings.Contains(p.Body, `id="admin-warning"`) || !strings.Contains(p.Body, "You are an administrator of this gateway") ||
			!strings.Contains(p.Body, "administrator rights") {
			t.Errorf("the admin API's consent page lacks the administrator warning:\n%s", p.Body)
		}
		r := h.redeemFor(reg.ClientID, h.codeFrom(h.approve(b, p), state), pk, admin)
		wantTokens(t, r)
		if aud := audience(t, h, r.AccessToken); !slices.Equal(aud, []string{admin}) {
			t.Errorf("aud = %v, want [%s]", aud, admin)
		}
		// Refreshed, it stays the admin API's; it never becomes alpha's.
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {reg.ClientID}, "refresh_token": {r.RefreshToken},
			"resource": {alpha}}), http.StatusBadRequest, "invalid_target")
	}
	mu.Lock()
	if !slices.Equal(asked, []string{"ada", "ada"}) {
		t.Errorf("the admin check was asked for %v, want ada on each admin page", asked)
	}
	mu.Unlock()
	// Nothing was remembered for the admin API.
	objs, err := h.store.ListObjects(t.Context(), store.KindOAuthConsent)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		var rec consentRecord
		if json.Unmarshal(o.Doc, &rec) != nil || rec.Resource != alpha || rec.ClientID != reg.ClientID {
			t.Errorf("stored consent %s: %s (want alpha's only)", o.Name, o.Doc)
		}
	}

	// beta is another resource: asked for, and a denial there leaves
	// alpha's consent as it was.
	pk = newPKCE()
	p, state = h.authorizeFor(b, reg.ClientID, pk, beta)
	wantConsentFor(t, p, "the MCP server beta at "+beta, beta)
	d := b.Submit(h.url, p, "decision", url.Values{"decision": {"deny"}})
	wantRedirectError(t, h, d, state, "access_denied")
	pk = newPKCE()
	p, state = h.authorizeFor(b, reg.ClientID, pk, alpha)
	wantTokens(t, h.redeemFor(reg.ClientID, h.codeFrom(p, state), pk, alpha))

	// Another client the person never approved: asked for alpha too.
	other := h.register(oauth.ClientMetadata{ClientName: "Other", RedirectURIs: []string{redirect}})
	p, _ = h.authorizeFor(b, other.ClientID, newPKCE(), alpha)
	wantConsentFor(t, p, "the MCP server alpha at "+alpha, alpha)

	// A route the gateway does not have is no resource.
	p, state = h.authorizeFor(b, reg.ClientID, newPKCE(), h.url+"/mcp/gamma")
	wantRedirectError(t, h, p, state, "invalid_target")
}

// TestAdminConsentWarning: the admin API's page says what approving gives
// to a person without admin rights, and, when mcpgate cannot tell, what
// it gives if the person has them.
func TestAdminConsentWarning(t *testing.T) {
	for _, tt := range []struct {
		name   string
		admins AdminChecker
		want   string
	}{
		{"not an admin", fakeAdmins{isAdmin: func(oauth.Identity) (bool, error) { return false, nil }}, "your own connections and credentials"},
		{"the check failed", fakeAdmins{isAdmin: func(oauth.Identity) (bool, error) { return false, errors.New("store down") }}, "If you have administrator rights at this gateway"},
		{"no checker", nil, "If you have administrator rights at this gateway"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, withAdmins(tt.admins))
			reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
			p, _ := h.authorizeFor(newBrowser(t, redirect), reg.ClientID, newPKCE(), h.url+"/admin/v1")
			wantConsentFor(t, p, "the admin API of mcpgate at "+h.url, h.url+"/admin/v1")
			if !strings.Contains(p.Body, `id="admin-warning"`) || !strings.Contains(html.UnescapeString(p.Body), tt.want) {
				t.Errorf("the warning does not say %q:\n%s", tt.want, p.Body)
			}
		})
	}
}

// TestResourceAtTokenEndpoint: a token request names the grant's one
// resource or none; in any spelling of it, not another resource. A
// refused request spends neither the code nor the refresh token.
func TestResourceAtTokenEndpoint(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	alpha, admin := h.url+"/mcp/alpha", h.url+"/admin/v1"
	b := newBrowser(t, redirect)
	pk := newPKCE()
	p, state := h.authorizeFor(b, reg.ClientID, pk, alpha)
	code := h.codeFrom(h.approve(b, p), state)
	for _, res := range []string{admin, h.url, h.url + "/mcp", alpha + "/../../admin/v1", alpha + "#x", "not a url"} {
		wantError(t, h.redeemFor(reg.ClientID, code, pk, res), http.StatusBadRequest, "invalid_target")
	}
	r := h.redeemFor(reg.ClientID, code, pk, strings.Replace(alpha, "http://127.0.0.1", "HTTP://127.0.0.1", 1)+"/")
	wantTokens(t, r)
	for _, res := range []string{admin, h.url, h.url + "/mcp", h.url + "/mcp/beta"} {
		wantError(t, h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {reg.ClientID}, "refresh_token": {r.RefreshToken},
			"resource": {res}}), http.StatusBadRequest, "invalid_target")
	}
	r2 := h.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {reg.ClientID}, "refresh_token": {r.RefreshToken}, "resource": {alpha + "/"}})
	wantTokens(t, r2)
	if aud := audience(t, h, r2.AccessToken); !slices.Equal(aud, []string{alpha}) {
		t.Errorf("aud = %v, want [%s]", aud, alpha)
	}
}

// TestOldConsentsDoNotCount: a consent recorded per person and client
// only (before consent was per resource) counts for no resource: the
// person is asked again. It is deleted at start and by the purge (an
// older replica of a fleet may still write one).
func TestOldConsentsDoNotCount(t *testing.T) {
	h := newHarness(t, withoutIdP(), withStoreKeys())
	secret := addKey(t, h.store, "ada-laptop", "ada", "eng")
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	oldName := sha256Hex("key:ada-laptop" + "\x00" + reg.ClientID)
	putOld := func() {
		t.Helper()
		if _, err := h.store.PutObject(t.Context(), store.KindOAuthConsent, oldName,
			json.RawMessage(`{"client_id":"`+reg.ClientID+`","approved":1700000000}`)); err != nil {
			t.Fatal(err)
		}
	}
	putOld()
	for _, res := range []string{h.url + "/mcp", h.url + "/admin/v1"} {
		b := newBrowser(t, redirect)
		p, _ := h.authorizeFor(b, reg.ClientID, newPKCE(), res)
		p = b.Submit(h.url, p, `name="key"`, url.Values{"key": {secret}})
		if p.Location != nil || !strings.Contains(p.Body, `name="decision"`) {
			t.Fatalf("%s: an old consent was taken as consent (status %d, location %v)", res, p.Status, p.Location)
		}
	}
	if err := h.srv.purge(t.Context(), h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.GetObject(t.Context(), store.KindOAuthConsent, oldName); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old consent is still stored after the purge (%v)", err)
	}
	putOld()
	again, err := New(t.Context(), Options{Login: &h.srv.login, PublicURL: h.url, Store: h.store, DataDir: h.dir, Keys: storeKeys{h.store}})
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if _, err := h.store.GetObject(t.Context(), store.KindOAuthConsent, oldName); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old consent is still stored after a start (%v)", err)
	}
}

// TestRefreshOfGrantsWithoutTheirResource: refresh token families issued
// before tokens were bound to one resource with its own consent end at
// their next refresh: one bound to the issuer (an authorization without
// resource), and one for the admin API (which the person may never have
// seen named). A current family for a route goes on.
func TestRefreshOfGrantsWithoutTheirResource(t *testing.T) {
	h := newHarness(t)
	reg := h.register(oauth.ClientMetadata{RedirectURIs: []string{redirect}})
	now := h.clock.Now()
	mk := func(resource string, version int) string {
		t.Helper()
		fam := familyRecord{ClientID: reg.ClientID, Issuer: h.url, Scope: "mcp", Resource: resource, Version: version,
			Person: personRecord{Issuer: h.idp.issuer(), Subject: "s:u-1", User: "ada"}, Created: now, Expires: now.Add(time.Hour)}
		tok, err := h.srv.storeRefresh(t.Context(), randomToken(16), &fam)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, tt := range []struct {
		name     string
		resource string
		version  int
		ok       bool
	}{
		{"old, bound to the issuer", h.url, 0, false},
		{"old, for the admin API", h.url + "/admin/v1", 0, false},
		{"old, for a route", h.url + "/mcp", 0, true},
		{"current, for the admin API", h.url + "/admin/v1", familyVersion, true},
		{"current, bound to the issuer", h.url, familyVersion, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok := mk(tt.resource, tt.version)
			r := h.refresh(reg.ClientID, tok)
			if !tt.ok {
				wantError(t, r, http.StatusBadRequest, "invalid_grant")
				return
			}
			wantTokens(t, r)
			if aud := audience(t, h, r.AccessToken); !slices.Equal(aud, []string{tt.resource}) {
				t.Errorf("aud = %v, want [%s]", aud, tt.resource)
			}
		})
	}
}
