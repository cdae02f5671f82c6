package security

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Hole 2: mcpgate's own authorization server (auth.login) must never
// hand an MCP client a token for the admin API, or for any resource the
// person did not approve for that client. SPEC S22.3 and S22.4: every
// token is bound to exactly one resource (never the issuer), consent is
// per person, client and resource, and the consent page names the
// resource ("the admin API" in words).
//
// The person here is ops, whose key has admin rights and who logs in
// with it (auth.login.keys: no IdP needed). The attacker is an MCP client
// ops once approved: it tries to turn that approval into an admin token.
// The victim's state is the gateway's keys: an admin token would create
// one.

// asBase is the gateway's public_url in these cases. It has no port, so
// the default-port and upper-case tricks have something to play with; the
// suite reaches the gateway on its loopback address.
const asBase = "http://gw.example"

// opsKey is the key of a person with admin rights.
const opsKey = "mcpg_sec-ops-admin-0123456789abcdef"

type asFixture struct {
	g           *gateway
	alpha, beta *upstream
}

func newASFixture(t *testing.T) *asFixture {
	t.Helper()
	f := &asFixture{alpha: newUpstream(t, "alpha"), beta: newUpstream(t, "beta")}
	cfg := fmt.Sprintf(`public_url: %s
auth:
  master_key: %q
  keys:
    - {alias: ops, key: %q, user: ops, admin: true}
    - {alias: alice, key: %q, user: alice, servers: [alpha]}
  login: {keys: true}
servers:
`, asBase, masterKey, opsKey, aliceKey)
	f.g = startGateway(t, cfg+f.alpha.server()+f.beta.server())
	return f
}

// The one place that says what hole 2's refusals look like, so that they
// can be tightened when the fix has chosen its words.

// refusedTarget checks an authorization request refused before any code:
// a redirect to the client with error=invalid_target (RFC 8707).
func refusedTarget(t *testing.T, who string, o authOutcome) {
	t.Helper()
	if o.Code != "" {
		t.Errorf("%s: the client got a code", who)
	}
	if o.Error != "invalid_target" {
		t.Errorf("%s: error %q (%s), want invalid_target", who, o.Error, o.ErrorDesc)
	}
}

// refusedMissingResource checks an authorization request without
// resource refused before any code: invalid_target, or invalid_request
// (the parameter is missing).
func refusedMissingResource(t *testing.T, who string, o authOutcome) {
	t.Helper()
	if o.Code != "" {
		t.Errorf("%s: the client got a code", who)
	}
	if o.Error != "invalid_target" && o.Error != "invalid_request" {
		t.Errorf("%s: error %q (%s), want invalid_target or invalid_request", who, o.Error, o.ErrorDesc)
	}
}

// consentNamesAdmin checks that a consent page says in words that the
// admin API is what the client asks for.
func consentNamesAdmin(t *testing.T, who, page string) {
	t.Helper()
	if text := pageText(page); !strings.Contains(strings.ToLower(text), "admin api") {
		t.Errorf("%s: the consent page does not name the admin API: %q", who, text)
	}
}

// consentNamesRoute checks that a consent page names the MCP route the
// client asks for (its server's name is on the page) and does not speak
// of the admin API.
func consentNamesRoute(t *testing.T, who, page, server string) {
	t.Helper()
	text := pageText(page)
	if !strings.Contains(text, server) {
		t.Errorf("%s: the consent page does not name the resource (%s): %q", who, server, text)
	}
	if strings.Contains(strings.ToLower(text), "admin api") {
		t.Errorf("%s: the consent page for an MCP route speaks of the admin API: %q", who, text)
	}
}

// refusedToken checks that a bearer token was refused on an MCP route:
// 401, the OAuth challenge error="invalid_token" (RFC 6750), JSON-RPC
// -32001.
func refusedToken(t *testing.T, who string, st int, hdr http.Header, body string) {
	t.Helper()
	if accepted(st, body) {
		t.Errorf("%s: the token was accepted", who)
		return
	}
	if st != http.StatusUnauthorized {
		t.Errorf("%s: HTTP %d %s, want 401", who, st, body)
	}
	if ch := hdr.Get("WWW-Authenticate"); !strings.Contains(ch, `error="invalid_token"`) {
		t.Errorf("%s: WWW-Authenticate %q, want error=\"invalid_token\"", who, ch)
	}
	if e := rpcErrorOf(body); e == nil || e.Code != -32001 {
		t.Errorf("%s: body %s, want JSON-RPC error -32001", who, body)
	}
}

// refusedAdmin checks that a token got nothing from the admin API: the
// list and the creation of an admin key are both 401.
func refusedAdmin(t *testing.T, who string, list, create int, body string) {
	t.Helper()
	if list == http.StatusOK || create == http.StatusCreated {
		t.Errorf("%s: the admin API took the token (list keys: HTTP %d, create an admin key: HTTP %d %s)", who, list, create, body)
		return
	}
	if list != http.StatusUnauthorized || create != http.StatusUnauthorized {
		t.Errorf("%s: list keys HTTP %d, create HTTP %d %s; want 401 for both", who, list, create, body)
	}
}

// probeRoutes are the places a token could be tried on.
var probeRoutes = []string{"/mcp/alpha", "/mcp/beta", "/mcp", "/mcp/alpha,beta"}

// onlyWorksOn checks that tok is accepted on the MCP routes in allowed
// and on no other, and never on the admin API.
func onlyWorksOn(t *testing.T, g *gateway, who, tok string, allowed ...string) {
	t.Helper()
	worksAtMostOn(t, g, who, tok, true, allowed...)
}

// worksAtMostOn checks that tok is refused on every MCP route but those
// in allowed (where it must work when must is set) and on the admin API.
func worksAtMostOn(t *testing.T, g *gateway, who, tok string, must bool, allowed ...string) {
	t.Helper()
	for _, p := range probeRoutes {
		st, hdr, body := g.mcpPost(t, p, bearer(tok), "", initBody)
		if slices.Contains(allowed, p) {
			if must && !accepted(st, body) {
				t.Errorf("%s on %s, its own route: HTTP %d %s", who, p, st, body)
			}
			continue
		}
		refusedToken(t, who+" on "+p, st, hdr, body)
	}
	list, create, body := tryAdmin(t, g, tok, "pwned-"+aliasRE.ReplaceAllString(who, "-"), "")
	refusedAdmin(t, who+" on /admin/v1", list, create, body)
}

// aliasRE is what a key alias may not hold.
var aliasRE = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// TestASNoResourceIsNoAdminToken is hole 2: an authorization request
// without resource got a token whose audience is the issuer, which every
// route and the admin API accepted, so an MCP client of a person with
// admin rights held a full admin token. Such a request is refused, or
// bound to <base>/mcp only.
func TestASNoResourceIsNoAdminToken(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)
	c := b.register(t, "notes app")
	o := b.authorize(t, c, noResource, opsKey, "approve")
	if o.Code == "" {
		refusedMissingResource(t, "authorization without resource", o)
	} else {
		tok := b.redeem(t, c, o)
		if aud := jwtAudience(t, tok.AccessToken); !slices.Equal(aud, []string{asBase + "/mcp"}) {
			t.Errorf("a token asked without resource has aud %q, want exactly [%s/mcp] (never the issuer %s)", aud, asBase, asBase)
		}
		onlyWorksOn(t, f.g, "the token asked without resource", tok.AccessToken, "/mcp")
		// Its refresh is bound the same way.
		r := b.token(t, c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}})
		if r.Status == http.StatusOK {
			onlyWorksOn(t, f.g, "its refreshed token", r.AccessToken, "/mcp")
		}
	}
	keysUntouched(t, f.g, before)
}

// TestASConsentIsPerResource is hole 2: consent was stored per person
// and client, so a client ops approved for /mcp/alpha later asked for
// resource=<base>/admin/v1 and got a code with no consent page, and with
// it an admin token. Consent is per person, client and resource: the
// admin API, and another route, are asked for explicitly; what ops
// approved stays approved.
func TestASConsentIsPerResource(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)
	c := b.register(t, "notes app")
	alpha, admin, beta := asBase+"/mcp/alpha", asBase+"/admin/v1", asBase+"/mcp/beta"

	o := b.authorize(t, c, alpha, opsKey, "approve")
	if o.Consent == "" || o.Code == "" {
		t.Fatalf("ops's first approval of the client for /mcp/alpha: consent shown %v, code %q, error %q %s", o.Consent != "", o.Code, o.Error, o.ErrorDesc)
	}
	tok := b.redeem(t, c, o)

	for _, tc := range []struct{ name, resource string }{
		{"the admin API", admin},
		{"another route (/mcp/beta)", beta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := b.authorize(t, c, tc.resource, opsKey, "")
			switch {
			case o.Code != "":
				t.Errorf("the client approved for /mcp/alpha got a code for %s without a consent page", tc.resource)
				got := b.redeem(t, c, o)
				list, create, body := tryAdmin(t, f.g, got.AccessToken, "pwned-by-consent", "")
				t.Logf("with that token the admin API answered: list keys HTTP %d, create an admin key HTTP %d %s", list, create, body)
			case o.Consent == "":
				t.Errorf("no consent page for %s: error %q %s", tc.resource, o.Error, o.ErrorDesc)
			case tc.resource == admin:
				consentNamesAdmin(t, "the client asking for the admin API", o.Consent)
			default:
				consentNamesRoute(t, "the client asking for /mcp/beta", o.Consent, "beta")
			}
		})
	}
	// ops says no to the admin API: the client learns access_denied.
	if o := b.authorize(t, c, admin, opsKey, "deny"); o.Consent != "" && (o.Error != "access_denied" || o.Code != "") {
		t.Errorf("ops denied the admin API: error %q, code %q; want access_denied and no code", o.Error, o.Code)
	}
	keysUntouched(t, f.g, before)

	// What ops approved still stands: /mcp/alpha is not asked again, and
	// the first token works there and nowhere else.
	if o := b.authorize(t, c, alpha, opsKey, ""); o.Code == "" || o.Consent != "" {
		t.Errorf("the client asking /mcp/alpha again: code %v, consent shown %v, error %q; want a code without asking", o.Code != "", o.Consent != "", o.Error)
	}
	onlyWorksOn(t, f.g, "the /mcp/alpha token", tok.AccessToken, "/mcp/alpha")
}

// TestASConsentNamesTheResource is hole 2: the consent page did not say
// what the client would reach. A client that was never approved asks for
// a route, and another for the admin API: each page names its resource,
// the admin API in words.
func TestASConsentNamesTheResource(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)

	o := b.authorize(t, b.register(t, "notes app"), asBase+"/mcp/alpha", opsKey, "")
	if o.Consent == "" {
		t.Fatalf("a new client asking for /mcp/alpha: no consent page (code %v, error %q)", o.Code != "", o.Error)
	}
	consentNamesRoute(t, "a new client asking for /mcp/alpha", o.Consent, "alpha")

	c := b.register(t, "notes app")
	o = b.authorize(t, c, asBase+"/admin/v1", opsKey, "")
	if o.Consent == "" {
		t.Fatalf("a new client asking for the admin API: no consent page (code %v, error %q)", o.Code != "", o.Error)
	}
	consentNamesAdmin(t, "a new client asking for the admin API", o.Consent)
	keysUntouched(t, f.g, before)

	// Held: a token for the admin API that ops did approve is an admin
	// token and nothing else (the console's sign-in).
	tok := b.login(t, c, asBase+"/admin/v1", opsKey)
	if list, _, _ := tryAdmin(t, f.g, tok.AccessToken, "", ""); list != http.StatusOK {
		t.Errorf("the approved admin API token cannot list keys: HTTP %d", list)
	}
	for _, p := range probeRoutes {
		st, hdr, body := f.g.mcpPost(t, p, bearer(tok.AccessToken), "", initBody)
		refusedToken(t, "the admin API token on "+p, st, hdr, body)
	}
}

// reach is where tok is accepted: the MCP routes of probeRoutes, and
// whether the admin API lists keys with it (read only).
func reach(t *testing.T, g *gateway, tok string) (routes []string, admin bool) {
	t.Helper()
	for _, p := range probeRoutes {
		if st, _, body := g.mcpPost(t, p, bearer(tok), "", initBody); accepted(st, body) {
			routes = append(routes, p)
		}
	}
	st, _, _ := g.request(t, http.MethodGet, "/admin/v1/keys", bearer(tok), "")
	return routes, st == http.StatusOK
}

// TestASResourceTricks: a client ops approved for /mcp/alpha dresses the
// admin API (or another route) up as something else, and ops, asked,
// approves whatever page is shown. Each request is refused
// (invalid_target), or yields a token that works on at most the one route
// the resource canonically names; a token works on the admin API only
// when the page ops approved named the admin API.
func TestASResourceTricks(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	tricks := []struct {
		resource string
		mayWork  []string // the route a token for it may be good for (never must)
	}{
		{resource: asBase, mayWork: []string{"/mcp"}}, // the issuer itself
		{resource: asBase + "/", mayWork: []string{"/mcp"}},
		{resource: asBase + "/mcp/alpha/../../admin/v1"},
		{resource: asBase + "/mcp/alpha/%2e%2e/%2e%2e/admin/v1"},
		{resource: asBase + "/mcp/alpha/%2E%2E/%2E%2E/admin/v1"},
		{resource: asBase + "/mcp/alpha/.%2e/%2e./admin/v1"},
		{resource: asBase + "/mcp/alpha/..%2f..%2fadmin/v1"},
		{resource: asBase + "/mcp/alpha%2f..%2f..%2fadmin%2fv1"},
		{resource: asBase + "/mcp/./../admin/v1"},
		{resource: asBase + "/mcp/alpha/", mayWork: []string{"/mcp/alpha"}},
		{resource: asBase + "/mcp/alpha?x=1", mayWork: []string{"/mcp/alpha"}},
		{resource: asBase + "/mcp/alpha#frag", mayWork: []string{"/mcp/alpha"}},
		{resource: asBase + "/mcp/alpha/../beta", mayWork: []string{"/mcp/beta"}},
		{resource: asBase + "/admin/v1/"},
		{resource: asBase + "/admin/v1/keys"},
		{resource: asBase + "/ADMIN/v1"},
		{resource: "HTTP://GW.EXAMPLE/admin/v1"},
		{resource: "http://GW.example/mcp/alpha", mayWork: []string{"/mcp/alpha"}},
		{resource: "http://gw.example:80/admin/v1"},
		{resource: "http://gw.example:80/mcp/alpha", mayWork: []string{"/mcp/alpha"}},
		{resource: "http://gw.example./admin/v1"},
		{resource: "https://gw.example/admin/v1"},
		{resource: "http://ops@gw.example/admin/v1"},
		{resource: "http://evil.example/mcp/alpha"},
		{resource: "http://gw.example.evil.example/admin/v1"},
		{resource: "//gw.example/admin/v1"},
		{resource: "/admin/v1"},
	}
	for _, tr := range tricks {
		t.Run(tr.resource, func(t *testing.T) {
			// A browser and a client of their own per trick (the login
			// limit is per address; an approval must not carry over).
			b := newASBrowser(t, f.g)
			c := b.register(t, "notes app")
			b.login(t, c, asBase+"/mcp/alpha", opsKey)
			o := b.authorize(t, c, tr.resource, opsKey, "approve")
			if o.Code == "" {
				t.Logf("refused: %s (%s)", o.Error, o.ErrorDesc)
				refusedTarget(t, tr.resource, o)
				return
			}
			tok := b.redeem(t, c, o)
			routes, admin := reach(t, f.g, tok.AccessToken)
			t.Logf("a code (consent page shown: %v); aud %q works on %q, admin API %v", o.Consent != "", jwtAudience(t, tok.AccessToken), routes, admin)
			if admin {
				if o.Consent == "" {
					t.Errorf("an admin token without any consent page (aud %q)", jwtAudience(t, tok.AccessToken))
				} else {
					consentNamesAdmin(t, "the page approved for an admin token", o.Consent)
				}
			}
			if len(routes) > len(tr.mayWork) || len(routes) == 1 && !slices.Contains(tr.mayWork, routes[0]) {
				t.Errorf("the token (aud %q, consent shown %v) works on %q, want at most %q", jwtAudience(t, tok.AccessToken), o.Consent != "", routes, tr.mayWork)
			}
		})
	}
	keysUntouched(t, f.g, before)
}

// TestASTokenStaysOnItsRoute (held): a token ops approved for /mcp/alpha
// works there and is refused on every other route and on the admin API,
// although ops has admin rights.
func TestASTokenStaysOnItsRoute(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)
	c := b.register(t, "notes app")
	tok := b.login(t, c, asBase+"/mcp/alpha", opsKey)
	if aud := jwtAudience(t, tok.AccessToken); !slices.Equal(aud, []string{asBase + "/mcp/alpha"}) {
		t.Errorf("aud %q, want [%s/mcp/alpha]", aud, asBase)
	}
	onlyWorksOn(t, f.g, "the /mcp/alpha token", tok.AccessToken, "/mcp/alpha")
	// The legacy SSE endpoints of other routes are other routes too.
	for _, p := range []string{"/mcp/beta/sse", "/sse"} {
		st, hdr, body := f.g.request(t, http.MethodGet, p, bearer(tok.AccessToken), "")
		refusedToken(t, "the /mcp/alpha token on GET "+p, st, hdr, body)
	}
	keysUntouched(t, f.g, before)
}

// TestASGrantKeepsItsResource (held): neither the code exchange nor a
// refresh can move a grant to another resource; the refusals leave the
// grant working for the client that holds it, and another client cannot
// use it.
func TestASGrantKeepsItsResource(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)
	c := b.register(t, "notes app")
	alpha := asBase + "/mcp/alpha"

	o := b.authorize(t, c, alpha, opsKey, "approve")
	if o.Code == "" {
		t.Fatalf("no code: %q %s", o.Error, o.ErrorDesc)
	}
	a := b.token(t, c, url.Values{"grant_type": {"authorization_code"}, "code": {o.Code},
		"redirect_uri": {c.redirect}, "code_verifier": {o.Verifier}, "resource": {asBase + "/admin/v1"}})
	if a.Status != http.StatusBadRequest || a.Error != "invalid_target" || a.AccessToken != "" {
		t.Errorf("redeeming a /mcp/alpha code for the admin API: HTTP %d %q, want 400 invalid_target", a.Status, a.Error)
	}

	tok := b.login(t, c, alpha, opsKey)
	for _, res := range []string{asBase + "/admin/v1", asBase + "/mcp/beta", asBase + "/mcp", asBase, asBase + "/mcp/alpha/../../admin/v1"} {
		r := b.token(t, c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}, "resource": {res}})
		if r.Status != http.StatusBadRequest || r.Error != "invalid_target" || r.AccessToken != "" {
			t.Errorf("refresh for resource %s: HTTP %d %q %s, want 400 invalid_target", res, r.Status, r.Error, r.ErrorDesc)
		}
	}
	// Another client presenting ops's refresh token.
	other := b.register(t, "other app")
	if r := b.token(t, other, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}}); r.Status != http.StatusBadRequest || r.Error != "invalid_grant" {
		t.Errorf("another client refreshing ops's token: HTTP %d %q, want 400 invalid_grant", r.Status, r.Error)
	}
	// The victim's grant is untouched: it refreshes, for /mcp/alpha.
	r := b.token(t, c, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken}})
	if r.Status != http.StatusOK {
		t.Fatalf("the client's own refresh after the refused ones: HTTP %d %q %s", r.Status, r.Error, r.ErrorDesc)
	}
	if aud := jwtAudience(t, r.AccessToken); !slices.Equal(aud, []string{alpha}) {
		t.Errorf("the refreshed token's aud %q, want [%s]", aud, alpha)
	}
	keysUntouched(t, f.g, before)
}

// TestASConsentCannotBeForged (held): a hostile page cannot approve for
// the person. The consent page may not be framed (clickjacking); the
// consent form posted from another browser (no binding cookie: a
// cross-site post does not carry the SameSite=Lax cookie), even with the
// request id and CSRF token copied, is refused; a wrong CSRF token from
// the person's own browser is refused; the person's own approval still
// works afterwards, once.
func TestASConsentCannotBeForged(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	victim := newASBrowser(t, f.g)
	c := victim.register(t, "notes app")
	o := victim.authorize(t, c, asBase+"/admin/v1", opsKey, "")
	if o.Consent == "" {
		t.Fatalf("no consent page: code %v, error %q", o.Code != "", o.Error)
	}
	if xfo := o.ConsentHeader.Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("consent page X-Frame-Options %q, want DENY", xfo)
	}
	if csp := o.ConsentHeader.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("consent page Content-Security-Policy %q, want frame-ancestors 'none'", csp)
	}
	action, vals, ok := pageForm(o.Consent, "decision", "approve")
	if !ok {
		t.Fatalf("no approve form on the consent page")
	}
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}

	attacker := newASBrowser(t, f.g)
	resp, body := attacker.doBody(t, http.MethodPost, action, form, vals.Encode())
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(resp.Header.Get("Location"), "code=") {
		t.Errorf("the consent form from another browser: HTTP %d Location %q %s, want 400", resp.StatusCode, resp.Header.Get("Location"), pageText(body))
	} else if !strings.Contains(pageText(body), "invalid_request") {
		t.Errorf("the consent form from another browser: %s, want invalid_request", pageText(body))
	}
	bad := url.Values{}
	for k, v := range vals {
		bad[k] = v
	}
	bad.Set("csrf", randomString(t))
	resp, body = victim.doBody(t, http.MethodPost, action, form, bad.Encode())
	if resp.StatusCode != http.StatusForbidden || strings.Contains(resp.Header.Get("Location"), "code=") {
		t.Errorf("the consent form with a wrong CSRF token: HTTP %d Location %q %s, want 403", resp.StatusCode, resp.Header.Get("Location"), pageText(body))
	}
	keysUntouched(t, f.g, before)

	resp, _ = victim.doBody(t, http.MethodPost, action, form, vals.Encode())
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, c.redirect) || !strings.Contains(loc, "code=") {
		t.Errorf("the person's own approval after the attempts: HTTP %d Location %q", resp.StatusCode, loc)
	}
	resp, _ = victim.doBody(t, http.MethodPost, action, form, vals.Encode())
	if strings.Contains(resp.Header.Get("Location"), "code=") {
		t.Errorf("the same approval posted twice gave a second code")
	}
}
