package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// OAuth2 client credentials for upstream egress (SPEC C3.6, RFC 6749 4.4).

const (
	// tokenExpirySkew: a token is refreshed this long before it expires,
	// so it does not expire in flight.
	tokenExpirySkew = 30 * time.Second
	// tokenMintTimeout bounds one token request; it does not depend on
	// the callers' contexts, as the mint is shared.
	tokenMintTimeout = 30 * time.Second
	// tokenFailureTTL is the negative cache: a dead IdP is asked at most
	// once per period, not by every call.
	tokenFailureTTL = time.Second
	// tokenDefaultTTL applies when the response has no usable expires_in.
	tokenDefaultTTL = 5 * time.Minute
	// tokenMaxTTL caps expires_in (and keeps the Duration from overflowing).
	tokenMaxTTL = 365 * 24 * time.Hour
	// maxTokenResponse bounds the token endpoint's response body.
	maxTokenResponse = 1 << 20
	// maxOAuthErrorDescription bounds the IdP's error_description in messages.
	maxOAuthErrorDescription = 200
)

// tokenSource mints and caches client-credentials access tokens for one
// upstream. Safe for concurrent use.
type tokenSource struct {
	server     string
	tokenURL   string // configured; "" means read from the pinned authorization server (discovery.go)
	serverURL  string // the MCP server's url
	resource   string // its canonical URI, the resource parameter (RFC 8707)
	resErr     error  // why serverURL has no canonical URI
	clientID   string
	clientAuth string // config.ClientSecretBasic, ClientSecretPost, PrivateKeyJWT or clientAuthNone
	label      string // what the endpoint is, in messages ("oauth2 token endpoint")
	secret     string
	auth       config.Auth // the block, for the private key (read at each mint)
	scopes     []string
	audience   string
	id         string
	hc         *http.Client // never follows redirects: every token request
	// metaHC fetches the pinned authorization server's metadata (no
	// token_url): hc's transport, redirects within the origin only.
	metaHC *http.Client
	log    *slog.Logger
	now    func() time.Time // injectable for tests

	mu         sync.Mutex
	discovered string // the token endpoint read from the authorization server's metadata, once read
	issuer     string // its authorization server's issuer identifier
	token      string
	refreshAt  time.Time // expiry minus the skew: mint again from here
	expiry     time.Time
	failure    error // last mint failure, served until failUntil
	failUntil  time.Time
	mint       *tokenMint // the mint in flight, shared by all waiters
}

// tokenMint is one token request; done is closed when token/err are set.
type tokenMint struct {
	done  chan struct{}
	token string
	err   error
}

// newTokenSource returns a token source for the oauth2 client a of server,
// reached at serverURL. hc nil means the package's shared client; either
// way a copy that does not follow redirects is used for every token
// request, so the credentials go to the endpoint the config names
// (token_url, or the pinned authorization server's) and nowhere else, and
// a copy that follows redirects within an origin for the pinned
// authorization server's metadata.
func newTokenSource(server, serverURL string, a *config.Auth, hc *http.Client, log *slog.Logger) *tokenSource {
	if hc == nil {
		hc = defaultHTTPClient()
	}
	noRedirect, meta := *hc, *hc
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	meta.CheckRedirect = sameOriginRedirect
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &tokenSource{
		server:     server,
		tokenURL:   a.TokenURL,
		serverURL:  serverURL,
		clientID:   a.ClientID,
		clientAuth: a.ClientAuthMethod(),
		label:      "oauth2 token endpoint",
		secret:     a.ClientSecret,
		auth:       *a,
		scopes:     slices.Clone(a.Scopes),
		audience:   a.Audience,
		hc:         &noRedirect,
		metaHC:     &meta,
		log:        log,
		now:        time.Now,
	}
	s.auth.Scopes = s.scopes
	s.resource, s.resErr = canonicalResource(serverURL)
	s.id = clientIdentity(a)
	return s
}

// Token returns a valid access token, minting one when none is cached or
// the cached one expires within tokenExpirySkew. Concurrent callers share
// one in-flight mint; a caller whose ctx ends stops waiting without
// aborting the mint (it runs on its own context, bounded by
// tokenMintTimeout). A failure is served from a negative cache for
// tokenFailureTTL, unless the previous token is still valid: then that is
// returned until it expires.
func (s *tokenSource) Token(ctx context.Context) (string, error) {
	s.mu.Lock()
	now := s.now()
	if s.token != "" && now.Before(s.refreshAt) {
		tok := s.token
		s.mu.Unlock()
		return tok, nil
	}
	m := s.mint
	if m == nil {
		if s.failure != nil && now.Before(s.failUntil) {
			tok, err := s.token, s.failure
			if tok != "" && now.Before(s.expiry) {
				err = nil
			}
			s.mu.Unlock()
			return tok, err
		}
		if err := ctx.Err(); err != nil {
			// Nobody would wait for a mint started now.
			s.mu.Unlock()
			return "", err
		}
		m = &tokenMint{done: make(chan struct{})}
		s.mint = m
		go s.run(tracing.Detach(ctx), m)
	}
	s.mu.Unlock()
	select {
	case <-m.done:
		return m.token, m.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// run performs mint m and publishes its result.
// parent carries only the span of the request that started it.
func (s *tokenSource) run(parent context.Context, m *tokenMint) {
	ctx, cancel := context.WithTimeout(parent, tokenMintTimeout)
	defer cancel()
	// expires_in counts from issuance: measuring from the request's start
	// errs on the early side.
	start := s.now()
	ctx, sp := tracing.StartInternal(ctx, "oauth2.token", s.server)
	tok, ttl, err := s.request(ctx)
	tracing.End(sp, err, faultOf(err))

	s.mu.Lock()
	now := s.now()
	if err == nil {
		s.token, s.expiry = tok, start.Add(ttl)
		s.refreshAt = s.expiry.Add(-min(tokenExpirySkew, ttl/2))
		s.failure = nil
		m.token = tok
	} else {
		s.failure, s.failUntil = err, now.Add(tokenFailureTTL)
		m.err = err
		if s.token != "" && now.Before(s.expiry) {
			// An IdP hiccup inside the skew window: the old token still works.
			m.token, m.err = s.token, nil
		}
	}
	s.mint = nil
	expiry := s.expiry
	s.mu.Unlock()

	// Logged before waking the waiters, so the line precedes their use.
	// The detail (addresses, network causes) is the log's only: the
	// error's message reaches callers.
	if err != nil {
		s.log.Warn("oauth2 token request failed", "server", s.server, "error", errorDetail(err))
	} else {
		s.log.Debug("oauth2 token minted", "server", s.server, "expires_in", ttl, "expires", expiry)
	}
	close(m.done)
}

// Invalidate drops the cached token if it is still stale (the token a
// request used and got 401 for), so the next Token mints a fresh one. When
// another caller already refreshed it nothing happens, so N callers
// rejected with the same token cause one mint. It reports whether a retry
// with a new token makes sense: false only when no token was used.
func (s *tokenSource) Invalidate(stale string) bool {
	if stale == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.token == stale {
		s.token, s.refreshAt, s.expiry = "", time.Time{}, time.Time{}
	}
	return true
}

// identity is the sha256 hex of the client credential (token URL, client
// id, sha256 of the secret, scopes, audience; for another client_auth than
// client_secret_basic also the method, sha256 of the inline key, the key
// file's path and signing_alg): stable across token refreshes, so pooled
// upstream sessions keyed by it survive them, and free of the secret.
func (s *tokenSource) identity() string { return s.id }

func clientIdentity(a *config.Auth) string {
	secret := sha256.Sum256([]byte(a.ClientSecret))
	// Scope order does not matter (RFC 6749 3.3).
	scopes := slices.Compact(slices.Sorted(slices.Values(a.Scopes)))
	if scopes == nil {
		scopes = []string{}
	}
	// A JSON array keeps the fields apart unambiguously.
	fields := []any{"oauth2-client-credentials", a.TokenURL, a.ClientID,
		hex.EncodeToString(secret[:]), scopes, a.Audience}
	if m := a.ClientAuthMethod(); m != config.ClientSecretBasic {
		// Appended only then, so the identities of existing configs stay.
		key := sha256.Sum256([]byte(a.PrivateKey))
		fields = append(fields, m, hex.EncodeToString(key[:]), a.PrivateKeyFile, a.SigningAlg)
	}
	b, _ := json.Marshal(fields)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// request performs one token request and returns the token and its
// lifetime. Errors never carry the secret, the key, a token or body text.
func (s *tokenSource) request(ctx context.Context) (string, time.Duration, error) {
	if s.resErr != nil {
		return "", 0, s.fail(KindInternal, 0, "oauth2: %v", s.resErr)
	}
	endpoint, aud, err := s.endpoint(ctx)
	if err != nil {
		return "", 0, err
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	if len(s.scopes) > 0 {
		form.Set("scope", strings.Join(s.scopes, " "))
	}
	if s.audience != "" {
		form.Set("audience", s.audience)
	}
	// RFC 8707 and the MCP authorization spec: every token request names
	// the server the token is for.
	form.Set("resource", s.resource)
	return s.post(ctx, endpoint, aud, form, "")
}

// clientAuthNone: a public client, identified by client_id in the form
// (RFC 6749 2.3; the IdP side of enterprise_managed without a secret).
const clientAuthNone = "none"

// post sends one token request, form plus the client authentication, to
// endpoint (aud: the audience of a client assertion) and returns the
// granted token and its lifetime. issued is the token type asked for:
// "" for an access token (token_type must be bearer, or absent), else an
// RFC 8693 token type URN, which issued_token_type must then name when
// present (token_type is not checked: an ID-JAG's is N_A). hide are
// further secrets of this request (a subject token) that an
// error_description may not echo. Errors never carry the secret, the key,
// a token or body text.
func (s *tokenSource) post(ctx context.Context, endpoint, aud string, form url.Values, issued string, hide ...string) (string, time.Duration, error) {
	switch s.clientAuth {
	case config.ClientSecretPost:
		form.Set("client_id", s.clientID)
		form.Set("client_secret", s.secret)
	case clientAuthNone:
		form.Set("client_id", s.clientID)
	case config.PrivateKeyJWT:
		assertion, err := s.clientAssertion(aud)
		if err != nil {
			return "", 0, err
		}
		form.Set("client_id", s.clientID)
		form.Set("client_assertion_type", clientAssertionType)
		form.Set("client_assertion", assertion)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		// The parse error would repeat the URL, which may hold userinfo.
		return "", 0, s.fail(KindInternal, 0, "%s: invalid URL", s.label)
	}
	if s.clientAuth == config.ClientSecretBasic {
		// RFC 6749 2.3.1: form-encode both before the Basic encoding.
		req.SetBasicAuth(url.QueryEscape(s.clientID), url.QueryEscape(s.secret))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")

	resp, err := s.hc.Do(req)
	if err != nil {
		return "", 0, s.failAt(KindUnreachable, 0, endpoint, err, "%s: %s", s.label, netCause(err))
	}
	defer resp.Body.Close()

	status := resp.StatusCode
	switch {
	case status >= 300 && status < 400:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return "", 0, s.fail(KindInvalidResponse, status,
			"%s answered HTTP %d (redirects are not followed)", s.label, status)
	case status >= 400:
		return "", 0, s.statusError(resp, hide...)
	case status < 200:
		return "", 0, s.fail(KindInvalidResponse, status, "%s answered HTTP %d", s.label, status)
	}

	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil {
		return "", 0, s.failAt(KindUnreachable, status, endpoint, err, "%s: read response: %s", s.label, netCause(err))
	}
	if len(data) > maxTokenResponse {
		return "", 0, s.fail(KindInvalidResponse, status, "%s: response exceeds %d bytes", s.label, maxTokenResponse)
	}
	// Raw fields: decoding errors would otherwise quote the values.
	var body struct {
		AccessToken json.RawMessage `json:"access_token"`
		TokenType   json.RawMessage `json:"token_type"`
		ExpiresIn   json.RawMessage `json:"expires_in"`
		IssuedType  json.RawMessage `json:"issued_token_type"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		return "", 0, s.fail(KindInvalidResponse, status, "%s: the response is not a JSON object", s.label)
	}
	var tok string
	if json.Unmarshal(body.AccessToken, &tok) != nil || tok == "" {
		return "", 0, s.fail(KindInvalidResponse, status, "%s: the response has no access_token", s.label)
	}
	if !validTokenChars(tok) {
		return "", 0, s.fail(KindInvalidResponse, status, "%s: access_token has characters not allowed in a header", s.label)
	}
	if issued != "" {
		if len(body.IssuedType) > 0 && string(body.IssuedType) != "null" {
			var typ string
			if json.Unmarshal(body.IssuedType, &typ) != nil || typ != issued {
				return "", 0, s.fail(KindInvalidResponse, status, "%s: issued_token_type is not %s", s.label, issued)
			}
		}
	} else if len(body.TokenType) > 0 && string(body.TokenType) != "null" {
		var typ string
		if json.Unmarshal(body.TokenType, &typ) != nil {
			return "", 0, s.fail(KindInvalidResponse, status, "%s: token_type is not a string", s.label)
		}
		if typ != "" && !strings.EqualFold(typ, "bearer") {
			if echoes(typ, append(hide, s.secret)) {
				return "", 0, s.fail(KindInvalidResponse, status, "%s: token_type is not bearer", s.label)
			}
			return "", 0, s.fail(KindInvalidResponse, status, "%s: token_type %q is not bearer", s.label, clipASCII(sanitizeOAuthText(typ), 32))
		}
	}
	ttl, err := parseExpiresIn(body.ExpiresIn)
	if err != nil {
		return "", 0, s.fail(KindInvalidResponse, status, "%s: %v", s.label, err)
	}
	return tok, ttl, nil
}

func (s *tokenSource) fail(kind Kind, status int, format string, args ...any) *Error {
	return &Error{Server: s.server, Kind: kind, Status: status, Err: fmt.Errorf(format, args...)}
}

// statusError maps an error status of the token endpoint. Only the OAuth
// error code and a short, sanitized error_description are kept from the
// body (RFC 6749 5.2).
func (s *tokenSource) statusError(resp *http.Response, hide ...string) *Error {
	status := resp.StatusCode
	var kind Kind
	switch {
	case status == http.StatusTooManyRequests:
		kind = KindRateLimited
	case status >= 500:
		kind = KindUnreachable
	default:
		// 400/401/403 are the IdP refusing the client; any other 4xx is a
		// token_url that cannot mint: either way no credential.
		kind = KindAuth
	}
	msg := fmt.Sprintf("%s answered HTTP %d", s.label, status)
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Error       json.RawMessage `json:"error"`
		Description json.RawMessage `json:"error_description"`
	}
	if json.Unmarshal(data, &body) == nil {
		var code, desc string
		_ = json.Unmarshal(body.Error, &code)
		_ = json.Unmarshal(body.Description, &desc)
		if code != "" && len(code) <= 64 && oauthErrorChars(code) {
			msg += ": " + code
			desc = sanitizeOAuthText(desc)
			if desc != "" && !echoes(desc, append(hide, s.secret)) {
				msg += fmt.Sprintf(" (%s)", clipASCII(desc, maxOAuthErrorDescription))
			}
		}
	}
	return &Error{Server: s.server, Kind: kind, Status: status, Err: errors.New(msg)}
}

// parseExpiresIn reads expires_in (seconds, a number or a numeric string).
// Absent, null or not positive means tokenDefaultTTL.
func parseExpiresIn(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return tokenDefaultTTL, nil
	}
	var secs float64
	if json.Unmarshal(raw, &secs) != nil {
		var str string
		if json.Unmarshal(raw, &str) != nil {
			return 0, errors.New("expires_in is not a number")
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, errors.New("expires_in is not a number")
		}
		secs = f
	}
	if secs <= 0 {
		return tokenDefaultTTL, nil
	}
	if secs >= tokenMaxTTL.Seconds() {
		return tokenMaxTTL, nil
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// validTokenChars reports whether tok is visible ASCII only: it goes into
// a header, and CR/LF or controls would corrupt it.
func validTokenChars(tok string) bool {
	for i := 0; i < len(tok); i++ {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return false
		}
	}
	return true
}

// oauthErrorChars is the RFC 6749 charset of error codes:
// %x20-21 / %x23-5B / %x5D-7E.
func oauthErrorChars(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// sanitizeOAuthText keeps the RFC 6749 error_description charset, turning
// anything else into '?'.
func sanitizeOAuthText(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	b := []byte(v)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '?'
		}
	}
	return string(b)
}

// clipASCII cuts v to n bytes (callers pass sanitized or quoted text).
func clipASCII(v string, n int) string {
	if len(v) > n {
		return v[:n]
	}
	return v
}

// echoes reports whether text contains one of the secrets (or a long
// enough piece of one: a description may quote a token cut short).
func echoes(text string, secrets []string) bool {
	for _, v := range secrets {
		if v == "" {
			continue
		}
		if strings.Contains(text, v) || (len(v) >= 16 && strings.Contains(text, v[:16])) {
			return true
		}
	}
	return false
}
