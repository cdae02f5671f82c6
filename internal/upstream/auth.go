package upstream

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Egress credentials (SPEC C3). One function, credentialValue, turns an
// auth type and a value into the one header value that goes out, and one,
// egressAuth.apply, decides which header carries it next to the static
// headers. The request preview (C3.8) and the fingerprint (C3.7) are built
// from the same two, so what an operator is shown is what is sent.

// Default credential slots.
const (
	headerAuthorization = "Authorization"
	headerAPIKey        = "X-Api-Key"
)

// StripScheme removes a leading authentication scheme from v: scheme
// (case-insensitive, after optional leading blanks) followed by at least
// one space or tab and a credential. A value that merely starts with the
// letters ("Bearertoken") or has nothing behind the scheme ("Bearer ") is
// returned unchanged: it is a credential, and a visibly wrong header is
// easier to diagnose upstream than a missing one (C3.2).
func StripScheme(v, scheme string) string {
	if rest, ok := config.CutScheme(strings.TrimLeft(v, " \t"), scheme); ok {
		return rest
	}
	return v
}

// credentialValue is the header value for a credential of auth type typ:
// exactly one scheme (C3.1, C3.2, C3.3). "" when typ carries none.
func credentialValue(typ, v string) string {
	switch typ {
	case config.AuthToken:
		return strings.TrimSpace("token " + StripScheme(v, "token"))
	case config.AuthBearer, config.AuthOAuth2, config.AuthPassthrough, config.AuthTokenExchange, config.AuthEnterpriseManaged:
		return strings.TrimSpace("Bearer " + StripScheme(v, "Bearer"))
	case config.AuthBasic:
		return basicValue(v)
	case config.AuthAPIKey, config.AuthAuthorization:
		// The operator owns the whole value: never scheme-stripped.
		return strings.TrimSpace(v)
	}
	return ""
}

// basicValue encodes user:pass (with or without the Basic scheme) and
// keeps an already-encoded "Basic <base64 of user:pass>" as it is.
func basicValue(v string) string {
	t := strings.TrimSpace(v)
	if rest, ok := config.CutScheme(t, "Basic"); ok {
		if !strings.Contains(rest, ":") {
			if dec, err := base64.StdEncoding.DecodeString(rest); err == nil && strings.Contains(string(dec), ":") {
				return "Basic " + rest
			}
		}
		t = rest
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(t))
}

// defaultSlot is the header an auth type's credential goes in when no
// header_name is configured.
func defaultSlot(typ string) string {
	if typ == config.AuthAPIKey {
		return headerAPIKey
	}
	return headerAuthorization
}

// egressAuth puts one upstream session's credentials on its requests.
type egressAuth struct {
	typ    string
	slot   string // canonical header name of the credential
	custom bool   // slot came from header_name (C3.5)
	// headers are the static headers with the fixed credential applied:
	// copied onto every request as they are when tokens is nil.
	headers http.Header
	static  http.Header  // the static headers alone (trimmed)
	tokens  bearerSource // minted tokens (oauth2, exchanged); nil: none
	// sig signs each request (aws_sigv4), after the headers above are set;
	// set by newHTTPBase.
	sig *sigV4
}

// newEgressAuth builds the credentials of a session. callerToken is the
// caller's own upstream token for a passthrough server ("" otherwise).
func newEgressAuth(srv *config.Server, tokens bearerSource, callerToken string) *egressAuth {
	a := &egressAuth{static: staticHeaders(srv.Headers), typ: config.AuthNone}
	if au := srv.Auth; au != nil && au.Type != "" {
		a.typ = au.Type
		a.slot = http.CanonicalHeaderKey(defaultSlot(au.Type))
		if au.HeaderName != "" {
			a.slot, a.custom = http.CanonicalHeaderKey(au.HeaderName), true
		}
	}
	var fixed string
	switch a.typ {
	case config.AuthNone, config.AuthAWSSigV4:
		// aws_sigv4: the signature is made per request (sigV4.sign).
	case config.AuthTokenExchange, config.AuthEnterpriseManaged:
		// Exchanged for the caller's token at request time; never the
		// caller's token itself.
		a.tokens = tokens
	case config.AuthOAuth2:
		a.tokens = tokens
		if tokens == nil && strings.TrimSpace(srv.Auth.Value) != "" {
			// A token resolved elsewhere (a stored user token) is sent as it is.
			fixed = credentialValue(a.typ, srv.Auth.Value)
		}
	case config.AuthPassthrough:
		if callerToken != "" {
			fixed = credentialValue(a.typ, callerToken)
		}
	case config.AuthOAuth2User:
		// The person's own access token, from the vault ("Bearer ...").
		if callerToken != "" {
			fixed = credentialValue(config.AuthBearer, callerToken)
		}
	case config.AuthUserAPIKey:
		// The person's stored credential: verbatim in a configured
		// header (as api_key's value), as a bearer token in Authorization.
		if callerToken != "" {
			fixed = credentialValue(config.AuthAPIKey, callerToken)
			if !a.custom {
				fixed = credentialValue(config.AuthBearer, callerToken)
			}
		}
	default:
		fixed = credentialValue(a.typ, srv.Auth.Value)
	}
	a.headers = a.with(fixed)
	return a
}

// with returns the static headers with credential value cred in its slot,
// by the precedence rules of C3.5: a configured slot cannot be shadowed by
// a static header of the same name (any case), and a static Authorization
// then travels beside it untouched; with the default slot, a static header
// of that name wins over the computed credential.
func (a *egressAuth) with(cred string) http.Header {
	h := a.static.Clone()
	if h == nil {
		h = make(http.Header)
	}
	if cred == "" {
		return h
	}
	if a.custom {
		for k := range h {
			if strings.EqualFold(k, a.slot) {
				delete(h, k)
			}
		}
		h[a.slot] = []string{cred}
		return h
	}
	if _, ok := h[a.slot]; !ok {
		h[a.slot] = []string{cred}
	}
	return h
}

// apply sets the credentials on h (a new request's header). It returns the
// minted token it used, for invalidate after a 401.
func (a *egressAuth) apply(ctx context.Context, h http.Header) (string, error) {
	if a.tokens == nil {
		for k, v := range a.headers {
			h[k] = v
		}
		return "", nil
	}
	tok, err := a.tokens.Token(ctx)
	if err != nil {
		return "", err
	}
	for k, v := range a.with(credentialValue(a.typ, tok)) {
		h[k] = v
	}
	return tok, nil
}

// refreshable reports whether a 401 may be answered by minting a fresh
// token and retrying once (C3.6).
func (a *egressAuth) refreshable() bool { return a.tokens != nil }

// slots are the headers that carry credentials and must not follow a
// redirect that Authorization would not follow (C4.3).
func (a *egressAuth) slots() []string {
	s := []string{headerAuthorization}
	if a.slot != "" && a.slot != headerAuthorization {
		s = append(s, a.slot)
	}
	if a.typ == config.AuthAWSSigV4 {
		// The session token is a credential; the rest belong to the
		// signature and mean nothing without it.
		s = append(s, sigV4Headers[1:]...)
	}
	return s
}

// Fingerprint is the sha256 hex of the effective egress credentials of
// srv for a caller presenting callerToken (C3.7): equal for equal
// credentials, different when any of them changes, and never containing
// them. Minted oauth2 tokens are represented by the client identity that
// mints them, so a refreshed token keeps its sessions.
func Fingerprint(srv *config.Server, callerToken string) string {
	a := newEgressAuth(srv, nil, callerToken)
	h := sha256.New()
	write := func(parts ...string) {
		for _, p := range parts {
			h.Write([]byte(p))
			h.Write([]byte{0})
		}
	}
	write("type", a.typ, "slot", a.slot)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range a.headers {
			if !yield(k) {
				return
			}
		}
	}) {
		write("h", k)
		write(a.headers[k]...)
	}
	if a.typ == config.AuthOAuth2 && srv.Auth != nil {
		write("oauth2", clientIdentity(srv.Auth))
	}
	if config.ExchangesCallerToken(a.typ) && srv.Auth != nil {
		// Per subject token: the sessions of two people never mix.
		subject := sha256.Sum256([]byte(callerToken))
		write("exchange", exchangeIdentity(srv.Auth), hex.EncodeToString(subject[:]))
	}
	if a.typ == config.AuthAWSSigV4 && srv.Auth != nil {
		// The signing scope; the credentials rotate under the same
		// sessions (their cache is the server's, not the session's).
		write("aws_sigv4", srv.Auth.Region, srv.Auth.Service)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PreviewRequest is what a request to an upstream would look like (C3.8).
type PreviewRequest struct {
	Method  string      `json:"method"`
	URL     string      `json:"url"`
	Headers http.Header `json:"headers"` // secrets masked
}

// Preview returns the initialize request the gateway would send to srv,
// built by the egress header logic itself, with every configured value
// masked (Mask): the credential and every static header, whatever its
// name. A credential that exists only at request time (minted, exchanged,
// the caller's own) is shown as a placeholder saying where it comes from;
// the headers the gateway sets itself (Accept, Content-Type, a SigV4
// signature's scope) are shown as they are.
func Preview(srv *config.Server) PreviewRequest {
	a := newEgressAuth(srv, nil, "")
	h := a.headers
	placeholder := ""
	with := func(p string) http.Header {
		placeholder = p
		return a.with(p)
	}
	switch a.typ {
	case config.AuthOAuth2:
		// Where and how it is minted; never the secret or the key.
		from := pinnedTokenEndpoint(srv.Auth)
		if srv.Auth.TokenURL != "" {
			from = redactURL(srv.Auth.TokenURL)
		}
		h = with("Bearer <minted from " + from + " with " + srv.Auth.ClientAuthMethod() + ">")
	case config.AuthPassthrough:
		h = with("Bearer <the caller's token>")
	case config.AuthTokenExchange:
		from := pinnedTokenEndpoint(srv.Auth)
		if srv.Auth.TokenURL != "" {
			from = redactURL(srv.Auth.TokenURL)
		}
		h = with("Bearer <the caller's token exchanged at " + from + ">")
	case config.AuthEnterpriseManaged:
		h = with("Bearer <an ID-JAG for the caller from " + redactURL(srv.Auth.IdPTokenURL) + ", redeemed at the server's authorization server>")
	case config.AuthOAuth2User:
		h = with("Bearer <the caller's own connected token>")
	case config.AuthUserAPIKey:
		if a.custom {
			h = with("<the caller's stored credential>")
		} else {
			h = with("Bearer <the caller's stored credential>")
		}
	}
	out := make(http.Header, len(h)+2)
	for k, v := range h {
		if placeholder != "" && k == a.slot && v[0] == placeholder {
			out[k] = []string{placeholder}
			continue
		}
		out[k] = []string{Mask(v[0])}
	}
	switch transportOf(srv) {
	case config.TransportOpenAPI:
		// An operation's request: its own method, path and body.
		out.Set(headerAccept, "application/json, */*;q=0.8")
	case config.TransportHTTP:
		out.Set(headerAccept, acceptPost)
		out.Set(headerContentType, contentTypeJSON)
	default:
		out.Set(headerAccept, acceptStream)
	}
	method := http.MethodPost
	if t := transportOf(srv); t == config.TransportSSE || t == config.TransportOpenAPI {
		method = http.MethodGet
	}
	if a.typ == config.AuthAWSSigV4 && srv.Auth != nil {
		// Signed last, over everything above, as a request is.
		for k, v := range sigV4Preview(method, srv, out) {
			out[k] = v
		}
	}
	return PreviewRequest{Method: method, URL: redactURL(cmp.Or(srv.URL, srv.BaseURL, srv.Spec)), Headers: out}
}

// Mask is how a configured value (a credential, a static header, an
// environment variable) is shown wherever a server's configuration is
// rendered: the CLI's preview, the admin API and so the console. It never
// shows the value: a known authorization scheme in front of it is kept
// ("Bearer ****"), and of a value of at least 16 characters its last 4,
// which tell two credentials apart without giving either away.
func Mask(v string) string {
	scheme, cred := "", strings.TrimSpace(v)
	if i := strings.IndexAny(cred, " \t"); i > 0 && knownScheme(cred[:i]) {
		scheme, cred = cred[:i+1], strings.TrimLeft(cred[i:], " \t")
	}
	if utf8.RuneCountInString(cred) >= 16 {
		r := []rune(cred)
		return scheme + "****" + string(r[len(r)-4:])
	}
	return scheme + "****"
}

// knownScheme reports whether w is an HTTP authorization scheme Mask may
// show: words that say how a credential is used, never part of it.
func knownScheme(w string) bool {
	for _, s := range []string{"Bearer", "Basic", "Token", "ApiKey", "Digest", "DPoP"} {
		if strings.EqualFold(w, s) {
			return true
		}
	}
	return false
}

// credentialSafeRedirect reports whether credential headers may follow a
// redirect from a to b: the same origin, or a same-host upgrade from http
// to https on default ports. Everything else (another host or subdomain,
// another port, a downgrade) drops them (C4.3) — stricter than net/http,
// which keeps Authorization for subdomains, other ports and downgrades.
func credentialSafeRedirect(a, b *url.URL) bool {
	if sameOrigin(a, b) {
		return true
	}
	return strings.EqualFold(a.Scheme, "http") && strings.EqualFold(b.Scheme, "https") &&
		strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == "80" && portOf(b) == "443"
}

// stripCredentialsOnRedirect wraps a CheckRedirect policy so that the
// credential headers (Authorization and the configured slot) are removed
// from a redirected request exactly when credentialSafeRedirect says so.
func stripCredentialsOnRedirect(slots []string, next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !credentialSafeRedirect(via[0].URL, req.URL) {
			for _, s := range slots {
				req.Header.Del(s)
			}
		}
		if next == nil {
			if len(via) >= 10 {
				return errTooManyRedirects
			}
			return nil
		}
		return next(req, via)
	}
}

var errTooManyRedirects = errors.New("stopped after 10 redirects")

// tokenHTTPClient is the client that talks to an oauth2 token endpoint:
// the configured one, or the package's default, guarded for a runtime
// server (guardedClient). The server's tls block is for the MCP server,
// not for its identity provider.
func tokenHTTPClient(srv *config.Server, configured *http.Client) *http.Client {
	hc := configured
	if hc == nil {
		hc = defaultHTTPClient()
	}
	g, err := guardedClient(srv, hc)
	if err != nil {
		// Refused rather than unguarded: every request fails with err.
		return &http.Client{Transport: failingTransport{err}}
	}
	return g
}

// pinnedTokenEndpoint says, for a preview, where a token is minted
// without token_url: at the pinned authorization server, or nowhere.
func pinnedTokenEndpoint(a *config.Auth) string {
	if a.AuthorizationServer == "" {
		return "nowhere: no token_url or authorization_server"
	}
	return "the token endpoint of " + redactURL(a.AuthorizationServer)
}

// failingTransport fails every request with err, sending nothing.
type failingTransport struct{ err error }

func (t failingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody(req)
	return nil, t.err
}
