package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Helpers for the identity cases (holes 2, 5, 7 and 11): a browser that
// walks mcpgate's own authorization server (auth.login) with nothing but
// HTTP and form posts, a JWT issuer of the suite's own for auth.oidc, and
// the admin-API probes that tell whether the victim's state changed.

// initBody is an initialize request: what any MCP client sends first, so
// its answer says whether a credential is accepted on a route.
const initBody = `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"security-suite","version":"1"}}}`

// bearer is the header set of a caller presenting tok.
func bearer(tok string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+tok)
	return h
}

// mcpPost sends body to path as an MCP client with hdr (plus host, when
// not empty, as the Host header) and returns the answer; an SSE answer's
// first message is returned as its body.
func (g *gateway) mcpPost(t testing.TB, path string, hdr http.Header, host, body string) (int, http.Header, string) {
	t.Helper()
	h := hdr.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if host != "" {
		h.Set("Host", host)
	}
	st, rh, b := g.request(t, http.MethodPost, path, h, body)
	if strings.HasPrefix(rh.Get("Content-Type"), "text/event-stream") {
		var first string
		readSSE(strings.NewReader(b), func(d []byte) {
			if first == "" {
				first = string(d)
			}
		})
		b = first
	}
	return st, rh, b
}

// rpcErrorOf is the JSON-RPC error in body, nil when there is none (or the
// body is no JSON-RPC message).
func rpcErrorOf(body string) *rpcError {
	var m rpcMsg
	if json.Unmarshal([]byte(body), &m) != nil {
		return nil
	}
	return m.Error
}

// accepted reports whether an initialize answer means the credential was
// taken: 200 with a result.
func accepted(st int, body string) bool {
	var m rpcMsg
	return st == http.StatusOK && json.Unmarshal([]byte(body), &m) == nil && len(m.Result) > 0 && m.Error == nil
}

// freePort is a loopback TCP port nobody listens on (taken and released:
// a dial to it is refused).
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

// ---------------------------------------------------------------------
// The victim's state, read with the master key.

// adminKeyAliases lists the runtime keys (the admin API's, not the
// file's), which an admin token could create.
func adminKeyAliases(t testing.TB, g *gateway) []string {
	t.Helper()
	st, _, body := g.request(t, http.MethodGet, "/admin/v1/keys", keyHeader(masterKey), "")
	if st != http.StatusOK {
		t.Fatalf("list keys with the master key: HTTP %d %s", st, body)
	}
	var res struct {
		Keys []struct {
			Alias string `json:"alias"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("list keys: %v: %s", err, body)
	}
	var out []string
	for _, k := range res.Keys {
		out = append(out, k.Alias)
	}
	slices.Sort(out)
	return out
}

// keysUntouched checks that the runtime keys are still want (the victim's
// admin state is as it was before the attack).
func keysUntouched(t testing.TB, g *gateway, want []string) {
	t.Helper()
	if got := adminKeyAliases(t, g); !slices.Equal(got, want) {
		t.Errorf("the gateway's keys changed: %q, want %q (an admin action got through)", got, want)
	}
}

// adminSessions is the number of live MCP sessions the admin API lists.
func adminSessions(t testing.TB, g *gateway) int {
	t.Helper()
	st, _, body := g.request(t, http.MethodGet, "/admin/v1/sessions", keyHeader(masterKey), "")
	if st != http.StatusOK {
		t.Fatalf("list sessions with the master key: HTTP %d %s", st, body)
	}
	var res struct {
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("list sessions: %v: %s", err, body)
	}
	return res.Total
}

// tryAdmin uses tok on the admin API the way an attacker holding it
// would: it lists the keys and creates an admin key named alias. It
// returns the status of each.
func tryAdmin(t testing.TB, g *gateway, tok, alias, host string) (list, create int, body string) {
	t.Helper()
	h := bearer(tok)
	if host != "" {
		h.Set("Host", host)
	}
	list, _, _ = g.request(t, http.MethodGet, "/admin/v1/keys", h, "")
	h.Set("Content-Type", "application/json")
	create, _, body = g.request(t, http.MethodPost, "/admin/v1/keys", h, fmt.Sprintf(`{"alias":%q,"admin":true}`, alias))
	return list, create, body
}

// ---------------------------------------------------------------------
// A browser for mcpgate's authorization server.

// srcAddr hands each browser its own loopback source address, so that
// the authorization server's per-address login limit (10 a minute) is
// one person's, as it would be in real life, not the whole suite's.
var srcAddr atomic.Uint32

// asBrowser is one person's browser and one MCP client's OAuth code: a
// cookie jar (the authorization server binds a login to the browser that
// started it), redirects stopped at the client's redirect URI, forms
// submitted as a person would.
type asBrowser struct {
	g  *gateway
	hc *http.Client
}

func newASBrowser(t testing.TB, g *gateway) *asBrowser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	n := srcAddr.Add(1)
	src := &net.TCPAddr{IP: net.IPv4(127, 1, byte(n>>8), byte(n))}
	d := &net.Dialer{LocalAddr: src, Timeout: 10 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &asBrowser{g: g, hc: &http.Client{Jar: jar, Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *asBrowser) do(t testing.TB, method, u string, form url.Values, hdr http.Header) (*http.Response, string) {
	t.Helper()
	h := hdr.Clone()
	body := ""
	if form != nil {
		if h == nil {
			h = http.Header{}
		}
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		body = form.Encode()
	}
	return b.doBody(t, method, u, h, body)
}

// doBody sends one request from the browser (its cookies, its address)
// and returns the answer, its body read.
func (b *asBrowser) doBody(t testing.TB, method, u string, hdr http.Header, body string) (*http.Response, string) {
	t.Helper()
	if strings.HasPrefix(u, "/") {
		u = b.g.base + u
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, string(rb)
}

// asClient is a client registered with RFC 7591 dynamic registration.
type asClient struct {
	id       string
	redirect string
}

// clientRedirect is every suite client's redirect URI: a loopback one, as
// a desktop MCP client registers; the browser stops there, it is never
// dialled.
const clientRedirect = "http://127.0.0.1:1/callback"

// register registers a public client (PKCE only) named name.
func (b *asBrowser) register(t testing.TB, name string) *asClient {
	t.Helper()
	body := fmt.Sprintf(`{"redirect_uris":[%q],"token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"],"client_name":%q}`, clientRedirect, name)
	resp, rb := b.doBody(t, http.MethodPost, "/oauth/register", http.Header{"Content-Type": {"application/json"}}, body)
	st := resp.StatusCode
	var res struct {
		ClientID string `json:"client_id"`
	}
	if st != http.StatusCreated || json.Unmarshal([]byte(rb), &res) != nil || res.ClientID == "" {
		t.Fatalf("register a client: HTTP %d %s", st, rb)
	}
	return &asClient{id: res.ClientID, redirect: clientRedirect}
}

// authOutcome is how an authorization request ended.
type authOutcome struct {
	// Error is the OAuth error of a redirect to the client (or "page
	// <status>" for an error page the authorization server showed).
	Error, ErrorDesc string
	// Code is the authorization code the client got ("" when none).
	Code string
	// Consent is the consent page's HTML when one was shown.
	Consent string
	// ConsentHeader is the consent page's response header.
	ConsentHeader http.Header
	// Verifier is the PKCE verifier of the request.
	Verifier string
}

var (
	formRE   = regexp.MustCompile(`(?is)<form([^>]*)>(.*?)</form>`)
	attrRE   = regexp.MustCompile(`(?i)([a-z-]+)="([^"]*)"`)
	inputRE  = regexp.MustCompile(`(?i)<input([^>]*)>`)
	buttonRE = regexp.MustCompile(`(?i)<button([^>]*)>`)
	tagRE    = regexp.MustCompile(`<[^>]*>`)
)

func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range attrRE.FindAllStringSubmatch(s, -1) {
		m[strings.ToLower(a[1])] = html.UnescapeString(a[2])
	}
	return m
}

// pageForm finds the page's form that has a button name=value and
// returns its action and its inputs' values with the button pressed.
func pageForm(page, name, value string) (action string, vals url.Values, ok bool) {
	for _, f := range formRE.FindAllStringSubmatch(page, -1) {
		for _, bt := range buttonRE.FindAllStringSubmatch(f[2], -1) {
			a := attrs(bt[1])
			if a["name"] != name || a["value"] != value {
				continue
			}
			vals = url.Values{}
			for _, in := range inputRE.FindAllStringSubmatch(f[2], -1) {
				ia := attrs(in[1])
				if ia["name"] != "" {
					vals.Set(ia["name"], ia["value"])
				}
			}
			vals.Set(name, value)
			return attrs(f[1])["action"], vals, true
		}
	}
	return "", nil, false
}

// pageText is a page's visible text, tags removed and entities decoded,
// spaces collapsed: what a person reads.
func pageText(page string) string {
	if i := strings.Index(page, "<body"); i >= 0 {
		page = page[i:]
	}
	return strings.Join(strings.Fields(html.UnescapeString(tagRE.ReplaceAllString(page, " "))), " ")
}

func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func randomString(t testing.TB) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// noResource, given as authorize's resource, leaves the parameter out.
const noResource = "\x00"

// authorize runs an authorization request of c for resource (noResource:
// without the parameter) with PKCE S256, logs in with key on the login
// page, and on a consent page decides: "approve", "deny", or "" to stop
// there (the person walks away).
func (b *asBrowser) authorize(t testing.TB, c *asClient, resource, key, decision string) authOutcome {
	t.Helper()
	out := authOutcome{Verifier: randomString(t)}
	q := url.Values{"response_type": {"code"}, "client_id": {c.id}, "redirect_uri": {c.redirect},
		"state": {"st-" + randomString(t)[:8]}, "code_challenge": {s256(out.Verifier)},
		"code_challenge_method": {"S256"}, "scope": {"mcp"}}
	if resource != noResource {
		q.Set("resource", resource)
	}
	resp, page := b.do(t, http.MethodGet, "/oauth/authorize?"+q.Encode(), nil, nil)
	loggedIn := false
	for step := 0; step < 10; step++ {
		if loc := resp.Header.Get("Location"); resp.StatusCode/100 == 3 {
			if strings.HasPrefix(loc, c.redirect) {
				u, err := url.Parse(loc)
				if err != nil {
					t.Fatalf("redirect to the client %q: %v", loc, err)
				}
				rq := u.Query()
				if rq.Get("state") != q.Get("state") {
					t.Errorf("redirect to the client with state %q, want %q", rq.Get("state"), q.Get("state"))
				}
				out.Error, out.ErrorDesc, out.Code = rq.Get("error"), rq.Get("error_description"), rq.Get("code")
				return out
			}
			ref, _ := url.Parse(resp.Request.URL.String())
			next, err := ref.Parse(loc)
			if err != nil {
				t.Fatalf("redirect to %q: %v", loc, err)
			}
			resp, page = b.do(t, http.MethodGet, next.String(), nil, nil)
			continue
		}
		if resp.StatusCode != http.StatusOK {
			out.Error = fmt.Sprintf("page %d", resp.StatusCode)
			out.ErrorDesc = pageText(page)
			return out
		}
		if action, vals, ok := pageForm(page, "login", "key"); ok && !loggedIn {
			loggedIn = true
			vals.Set("key", key)
			resp, page = b.do(t, http.MethodPost, resolve(resp, action), vals, nil)
			continue
		}
		if action, vals, ok := pageForm(page, "decision", "approve"); ok {
			out.Consent, out.ConsentHeader = page, resp.Header
			if decision == "" {
				return out
			}
			vals.Set("decision", decision)
			resp, page = b.do(t, http.MethodPost, resolve(resp, action), vals, nil)
			continue
		}
		t.Fatalf("an authorization server page with neither a key login nor a consent form (HTTP %d): %s", resp.StatusCode, pageText(page))
	}
	t.Fatalf("the authorization request went on for 10 steps without ending")
	return out
}

func resolve(resp *http.Response, action string) string {
	next, err := resp.Request.URL.Parse(action)
	if err != nil {
		return action
	}
	return next.String()
}

// tokenAnswer is the token endpoint's answer: tokens, or an OAuth error.
type tokenAnswer struct {
	Status       int
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
	Error        string `json:"error"`
	ErrorDesc    string `json:"error_description"`
}

// token posts form (client_id added) to the token endpoint.
func (b *asBrowser) token(t testing.TB, c *asClient, form url.Values) tokenAnswer {
	t.Helper()
	form.Set("client_id", c.id)
	st, _, body := b.g.request(t, http.MethodPost, "/oauth/token",
		http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, form.Encode())
	var a tokenAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("token endpoint: HTTP %d %s", st, body)
	}
	a.Status = st
	return a
}

// redeem exchanges an authorization outcome's code for tokens; it fails
// the test when the token endpoint refuses.
func (b *asBrowser) redeem(t testing.TB, c *asClient, o authOutcome) tokenAnswer {
	t.Helper()
	a := b.token(t, c, url.Values{"grant_type": {"authorization_code"}, "code": {o.Code},
		"redirect_uri": {c.redirect}, "code_verifier": {o.Verifier}})
	if a.Status != http.StatusOK || a.AccessToken == "" {
		t.Fatalf("redeem the code: HTTP %d %s %s", a.Status, a.Error, a.ErrorDesc)
	}
	return a
}

// login runs a whole login for resource, approving consent, and returns
// the tokens.
func (b *asBrowser) login(t testing.TB, c *asClient, resource, key string) tokenAnswer {
	t.Helper()
	o := b.authorize(t, c, resource, key, "approve")
	if o.Code == "" {
		t.Fatalf("login for %q: no code (error %q: %s)", resource, o.Error, o.ErrorDesc)
	}
	return b.redeem(t, c, o)
}

// jwtAudience is the aud claim of a JWT, read without checking anything.
func jwtAudience(t testing.TB, tok string) []string {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatalf("JWT payload: %v", err)
	}
	var c struct {
		Aud any `json:"aud"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("JWT payload: %v", err)
	}
	switch a := c.Aud.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, e := range a {
			s, _ := e.(string)
			out = append(out, s)
		}
		return out
	}
	return nil
}

// ---------------------------------------------------------------------
// A JWT issuer of the suite's own, for auth.oidc.

// jwtIssuer is an OpenID issuer on loopback http (which the config allows
// for tests): discovery and a JWKS with one ES256 key.
type jwtIssuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
	kid string
}

func newJWTIssuer(t testing.TB) *jwtIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &jwtIssuer{key: key, kid: "suite-key-1"}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"issuer": is.url(), "jwks_uri": is.url() + "/jwks",
			"id_token_signing_alg_values_supported": []string{"ES256"}})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: is.kid, Algorithm: "ES256", Use: "sig"}}})
	})
	is.srv = httptest.NewServer(mux)
	t.Cleanup(is.srv.Close)
	return is
}

func (is *jwtIssuer) url() string { return is.srv.URL }

// claims are a token's standard claims for user, audience aud, valid for
// ten minutes from now.
func (is *jwtIssuer) claims(user string, aud ...string) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": is.url(), "sub": user, "iat": now.Unix(), "nbf": now.Unix(),
		"exp": now.Add(10 * time.Minute).Unix(), "jti": fmt.Sprint(now.UnixNano())}
	switch len(aud) {
	case 0:
	case 1:
		c["aud"] = aud[0]
	default:
		c["aud"] = aud
	}
	return c
}

// sign signs claims with the issuer's key (ES256, its kid).
func (is *jwtIssuer) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	return signES256(t, is.key, is.kid, claims)
}

func signES256(t testing.TB, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// unsignedJWT is a token with header hdr and claims and the signature
// sig computes over "header.payload" (nil: an empty signature).
func unsignedJWT(t testing.TB, hdr, claims map[string]any, sig func(signingInput []byte) []byte) string {
	t.Helper()
	h, _ := json.Marshal(hdr)
	c, _ := json.Marshal(claims)
	in := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	var s []byte
	if sig != nil {
		s = sig([]byte(in))
	}
	return in + "." + base64.RawURLEncoding.EncodeToString(s)
}

// hs256 signs with HMAC-SHA256 under secret: the algorithm-confusion
// attack signs with the issuer's public key as the secret.
func hs256(secret []byte) func([]byte) []byte {
	return func(in []byte) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write(in)
		return m.Sum(nil)
	}
}

// oidcConfig is an auth section trusting is, with alice (servers alpha)
// and root (the admin API) granted, and the master key.
func oidcConfig(is *jwtIssuer) string {
	return fmt.Sprintf(`auth:
  master_key: %q
  oidc:
    - issuer: %q
  grants:
    - {user: alice, servers: [alpha]}
    - {user: root, admin: true}
`, masterKey, is.url())
}

// waitFor polls cond every 50ms for within, failing with what when it
// never holds.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(within, cond) {
		t.Fatalf("%s: not within %v", what, within)
	}
}
