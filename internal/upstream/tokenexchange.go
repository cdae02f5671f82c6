package upstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// Egress credentials exchanged for the caller's own token (SPEC C3, S9.4):
//
//   - oauth2_token_exchange (RFC 8693): the caller's validated token (the
//     subject token) is exchanged at token_url, or the token endpoint of
//     the pinned authorization_server as for oauth2, for an access token
//     for the server (audience, resource, scope);
//   - enterprise_managed (the MCP enterprise-managed authorization
//     extension, SEP-990): the caller's IdP ID token is exchanged at the
//     IdP (idp_token_url) for an identity assertion JWT authorization grant
//     (ID-JAG: requested_token_type urn:ietf:params:oauth:token-type:id-jag,
//     audience the issuer of the server's authorization server, resource
//     the server), which that authorization server's token endpoint,
//     read from the metadata of the authorization_server the config pins
//     (never one the server's metadata names), redeems with the JWT
//     bearer grant (RFC 7523) for an access token.
//
// The subject token reaches egress as the caller token of the request's
// context (WithCallerTokens), so the Manager keys these servers' sessions
// by it (byCaller): two people never share a session or a token. The
// exchanged tokens are cached per server in a bounded map keyed by the
// sha256 of the subject token and the audience, until shortly before they
// expire; they are never logged, and errors carry neither them nor the
// subject token.

const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
	grantJWTBearer     = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	// maxExchangeEntries bounds the cache of exchanged tokens of one
	// server (one entry per subject token).
	maxExchangeEntries = 4096
)

// ErrNoSubjectToken is in the chain of the error of an operation on an
// oauth2_token_exchange or enterprise_managed server for a caller without
// a token of its own to exchange (a caller authenticated by a virtual key,
// or anonymous): nothing was sent anywhere.
var ErrNoSubjectToken = errors.New("the caller has no token of its own to exchange (a JWT of an auth.oidc issuer)")

// bearerSource is what puts a minted bearer token on a session's
// requests: the oauth2 client-credentials tokenSource, or one subject's
// exchanged tokens.
type bearerSource interface {
	Token(ctx context.Context) (string, error)
	// Invalidate drops stale (the token a 401 answered) and reports
	// whether a retry with a fresh one makes sense.
	Invalidate(stale string) bool
}

// exchanger exchanges the subject tokens of one server's callers and
// caches the results. Safe for concurrent use.
type exchanger struct {
	server      string
	typ         string
	resource    string // the resource parameter
	resErr      error  // why there is none
	audience    string // oauth2_token_exchange: the audience parameter
	scopes      []string
	subjectType string
	// as is the token service (oauth2_token_exchange) or the server's
	// authorization server (enterprise_managed): its client, its token
	// endpoint, configured or the pinned authorization server's.
	as *tokenSource
	// idp is enterprise_managed's IdP token endpoint and client.
	idp *tokenSource
	id  string // the client identity, for the fingerprint
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	entries map[string]*exchangeEntry
}

// exchangeEntry is one subject's token, guarded by exchanger.mu.
type exchangeEntry struct {
	token     string
	refreshAt time.Time
	expiry    time.Time
	failure   error
	failUntil time.Time
	mint      *tokenMint
	used      time.Time
}

// newExchanger returns the exchanger of server (reached at serverURL) with
// auth block a; nil when a is of another type.
func newExchanger(server, serverURL string, a *config.Auth, hc *http.Client, log *slog.Logger) *exchanger {
	if a == nil || !config.ExchangesCallerToken(a.Type) {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x := &exchanger{
		server:  server,
		typ:     a.Type,
		scopes:  slices.Clone(a.Scopes),
		log:     log,
		now:     time.Now,
		entries: map[string]*exchangeEntry{},
	}
	x.resource, x.resErr = canonicalResource(serverURL)
	as := *a
	as.Scopes = x.scopes
	switch a.Type {
	case config.AuthTokenExchange:
		x.subjectType = a.SubjectTokenTypeOrDefault()
		x.audience = a.Audience
		if a.Resource != "" {
			x.resource, x.resErr = a.Resource, nil
		}
		x.as = newTokenSource(server, serverURL, &as, hc, log)
		x.as.label = "token exchange endpoint"
	case config.AuthEnterpriseManaged:
		x.subjectType = config.TokenTypeIDToken
		as.TokenURL = "" // always the pinned authorization server's: the ID-JAG's audience is its issuer
		x.as = newTokenSource(server, serverURL, &as, hc, log)
		x.as.label = "authorization server token endpoint (JWT bearer grant)"
		idp := config.Auth{Type: config.AuthOAuth2, TokenURL: a.IdPTokenURL, ClientID: a.IdPClientID, ClientSecret: a.IdPClientSecret}
		x.idp = newTokenSource(server, serverURL, &idp, hc, log)
		x.idp.label = "IdP token endpoint (ID-JAG exchange)"
		if a.IdPClientSecret == "" {
			x.idp.clientAuth = clientAuthNone
		}
	}
	x.id = exchangeIdentity(a)
	return x
}

// exchangeIdentity is the sha256 hex of everything that decides what an
// exchange grants, secrets hashed: stable across exchanges.
func exchangeIdentity(a *config.Auth) string {
	idp := sha256.Sum256([]byte(a.IdPClientSecret))
	b, _ := json.Marshal([]any{a.Type, clientIdentity(a), a.Resource, a.SubjectTokenType,
		a.IdPTokenURL, a.IdPClientID, hex.EncodeToString(idp[:])})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// forSubject is the bearer source of one session: subject's exchanged
// tokens.
func (x *exchanger) forSubject(subject string) bearerSource {
	return &subjectTokens{x: x, subject: subject}
}

type subjectTokens struct {
	x       *exchanger
	subject string
}

func (s *subjectTokens) Token(ctx context.Context) (string, error) { return s.x.Token(ctx, s.subject) }
func (s *subjectTokens) Invalidate(stale string) bool              { return s.x.Invalidate(s.subject, stale) }

// key is the cache key of subject: the sha256 of the subject token and
// the audience it is exchanged for (the subject token itself is not kept
// as a key).
func (x *exchanger) key(subject string) string {
	sum := sha256.Sum256([]byte(subject + "\x00" + x.audience))
	return hex.EncodeToString(sum[:])
}

// Token returns a valid exchanged token for subject, exchanging when none
// is cached or the cached one expires within tokenExpirySkew. Concurrent
// callers with one subject share one exchange, which runs on its own
// context (tokenMintTimeout); a failure is served for tokenFailureTTL.
func (x *exchanger) Token(ctx context.Context, subject string) (string, error) {
	if subject == "" {
		return "", &Error{Server: x.server, Kind: KindAuth, Err: ErrNoSubjectToken}
	}
	k := x.key(subject)
	x.mu.Lock()
	now := x.now()
	e := x.entries[k]
	if e == nil {
		x.makeRoomLocked(now)
		e = &exchangeEntry{}
		x.entries[k] = e
	}
	e.used = now
	if e.token != "" && now.Before(e.refreshAt) {
		tok := e.token
		x.mu.Unlock()
		return tok, nil
	}
	m := e.mint
	if m == nil {
		if e.failure != nil && now.Before(e.failUntil) {
			tok, err := e.token, e.failure
			if tok != "" && now.Before(e.expiry) {
				err = nil
			}
			x.mu.Unlock()
			return tok, err
		}
		if err := ctx.Err(); err != nil {
			x.mu.Unlock()
			return "", err
		}
		m = &tokenMint{done: make(chan struct{})}
		e.mint = m
		go x.run(tracing.Detach(ctx), e, m, subject)
	}
	x.mu.Unlock()
	select {
	case <-m.done:
		return m.token, m.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// makeRoomLocked keeps the cache within maxExchangeEntries: expired
// entries go first, then the least recently used.
func (x *exchanger) makeRoomLocked(now time.Time) {
	if len(x.entries) < maxExchangeEntries {
		return
	}
	for k, e := range x.entries {
		if e.mint == nil && !now.Before(e.expiry) {
			delete(x.entries, k)
		}
	}
	for len(x.entries) >= maxExchangeEntries {
		var oldest string
		var at time.Time
		for k, e := range x.entries {
			if e.mint == nil && (oldest == "" || e.used.Before(at)) {
				oldest, at = k, e.used
			}
		}
		if oldest == "" {
			return // all in flight: briefly over the bound
		}
		delete(x.entries, oldest)
	}
}

// run performs exchange m for subject and publishes it on e.
func (x *exchanger) run(parent context.Context, e *exchangeEntry, m *tokenMint, subject string) {
	ctx, cancel := context.WithTimeout(parent, tokenMintTimeout)
	defer cancel()
	start := x.now()
	ctx, sp := tracing.StartInternal(ctx, "oauth2.token_exchange", x.server)
	tok, ttl, err := x.exchange(ctx, subject)
	tracing.End(sp, err, faultOf(err))

	x.mu.Lock()
	now := x.now()
	if err == nil {
		e.token, e.expiry = tok, start.Add(ttl)
		e.refreshAt = e.expiry.Add(-min(tokenExpirySkew, ttl/2))
		e.failure = nil
		m.token = tok
	} else {
		e.failure, e.failUntil = err, now.Add(tokenFailureTTL)
		m.err = err
		if e.token != "" && now.Before(e.expiry) {
			m.token, m.err = e.token, nil
		}
	}
	e.mint = nil
	x.mu.Unlock()

	if err != nil {
		x.log.Warn("token exchange failed", "server", x.server, "auth", x.typ, "error", errorDetail(err))
	} else {
		x.log.Debug("token exchanged", "server", x.server, "auth", x.typ, "expires_in", ttl)
	}
	close(m.done)
}

// Invalidate drops subject's cached token if it is still stale.
func (x *exchanger) Invalidate(subject, stale string) bool {
	if stale == "" {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if e := x.entries[x.key(subject)]; e != nil && e.token == stale {
		e.token, e.refreshAt, e.expiry = "", time.Time{}, time.Time{}
	}
	return true
}

// exchange performs the requests of one exchange.
func (x *exchanger) exchange(ctx context.Context, subject string) (string, time.Duration, error) {
	if x.resErr != nil {
		return "", 0, x.as.fail(KindInternal, 0, "%s: %v", x.typ, x.resErr)
	}
	endpoint, aud, err := x.as.endpoint(ctx)
	if err != nil {
		return "", 0, err
	}
	scope := strings.Join(x.scopes, " ")
	if x.typ == config.AuthTokenExchange {
		form := url.Values{
			"grant_type":           {grantTokenExchange},
			"subject_token":        {subject},
			"subject_token_type":   {x.subjectType},
			"requested_token_type": {config.TokenTypeAccessToken},
			"resource":             {x.resource},
		}
		if x.audience != "" {
			form.Set("audience", x.audience)
		}
		if scope != "" {
			form.Set("scope", scope)
		}
		return x.as.post(ctx, endpoint, aud, form, "", subject)
	}

	// enterprise_managed: the ID-JAG, for the pinned authorization server
	// (aud, its issuer), then the JWT bearer grant there.
	form := url.Values{
		"grant_type":           {grantTokenExchange},
		"subject_token":        {subject},
		"subject_token_type":   {config.TokenTypeIDToken},
		"requested_token_type": {config.TokenTypeIDJAG},
		"audience":             {aud},
		"resource":             {x.resource},
	}
	if scope != "" {
		form.Set("scope", scope)
	}
	jag, _, err := x.idp.post(ctx, x.idp.tokenURL, x.idp.tokenURL, form, config.TokenTypeIDJAG, subject)
	if err != nil {
		return "", 0, err
	}
	grant := url.Values{
		"grant_type": {grantJWTBearer},
		"assertion":  {jag},
		"resource":   {x.resource},
	}
	if scope != "" {
		grant.Set("scope", scope)
	}
	return x.as.post(ctx, endpoint, aud, grant, "", subject, jag)
}

// bearer is the bearer source of a session opened with o: the caller
// token's exchanges, the oauth2 token source, or nil.
func (o *Options) bearer() bearerSource {
	switch {
	case o.exchanger != nil:
		return o.exchanger.forSubject(o.CallerToken)
	case o.tokens != nil:
		return o.tokens
	}
	return nil
}
