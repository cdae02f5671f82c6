package oauth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
)

// The flow of [Verifier.Verify]:
//
//	shape (three base64url segments, not a JWE)
//	-> unverified iss -> the configured issuer (exact match) or a local one
//	-> go-jose parse with that issuer's algorithm allow-list
//	-> its keys (local: in memory; remote: discovery + JWKS, cached,
//	   re-fetched for an unknown kid at most once per refetchInterval)
//	-> signature with a key whose type fits the algorithm
//	-> iss, aud, exp, nbf, iat -> required scopes -> Identity.
//
// Nothing but iss is read from the claims before the signature is checked,
// and iss only picks which keys may verify it.

// DefaultHTTPTimeout bounds one discovery-and-JWKS fetch of an issuer's
// keys, and is the timeout of the default HTTP client.
const DefaultHTTPTimeout = 10 * time.Second

const (
	// refetchInterval is the least time between two fetches of an
	// issuer's keys: an unknown kid (rotation) or a failed fetch waits for
	// it, so neither a flood of forged kids nor an IdP outage turns into
	// a flood of requests to the IdP.
	refetchInterval = 30 * time.Second
	// keysMaxAge is how long fetched keys are used before the next token
	// re-fetches them, so a key the issuer withdrew stops verifying
	// within the hour even if no new kid ever shows up. If that re-fetch
	// fails the old keys stay in use.
	keysMaxAge = time.Hour
	// maxDocumentSize bounds a discovery document or JWKS.
	maxDocumentSize = 1 << 20
	// maxTokenSize bounds what is decoded before anything is known about
	// the token; real access tokens, even with group lists, stay well
	// under it.
	maxTokenSize = 64 << 10
	// maxCandidateKeys bounds the signature checks for a token without
	// kid.
	maxCandidateKeys = 8
)

// Log attribute keys.
const (
	logIssuer = "issuer"
	logReason = "reason"
	logError  = "error"
)

// VerifierOptions configure a [Verifier]. The zero value of each field
// means its documented default.
type VerifierOptions struct {
	// Issuers are the OIDC issuers whose tokens are accepted.
	Issuers []config.OIDCIssuer
	// Local are issuers whose public keys are in this process (mcpgate's
	// own authorization server).
	Local []LocalIssuer
	// HTTPClient fetches discovery documents and JWKS. Default: a client
	// with DefaultHTTPTimeout that follows redirects only within a host.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Skew is the leeway for exp, nbf and iat of the Issuers' tokens
	// (a local issuer has its own, LocalIssuer.Skew). Default
	// config.DefaultClockSkew; negative means none.
	Skew time.Duration
	// Logger receives key fetch failures (Warn) and the reason each
	// token was rejected (Debug); never a token. Default: discard.
	Logger *slog.Logger
}

// LocalIssuer is an issuer whose public keys are in this process.
type LocalIssuer struct {
	// Match reports whether iss is this issuer (mcpgate's AS issuer is its
	// own base URL, which may be derived per request, so a func).
	Match func(iss string) bool
	// Keys returns the current public signing keys; called once per
	// token, so it must be cheap and safe for concurrent use.
	Keys func() jose.JSONWebKeySet
	// Claims say where the identity is in the tokens, e.g. {User: "user",
	// Email: "email", Teams: "teams", Org: "org", Roles: "roles"}.
	Claims config.ClaimPaths
	// Algs are the accepted algorithms. Default ["ES256"].
	Algs []string
	// Skew is the leeway for exp, nbf and iat of this issuer's tokens,
	// instead of VerifierOptions.Skew (which is for other parties'
	// clocks): they were signed by this process, or by a replica sharing
	// its keys on an NTP-synced clock, so a token lives as long as its
	// issuer said. Default DefaultLocalSkew; negative means none.
	Skew time.Duration
}

// DefaultLocalSkew is a local issuer's default leeway for exp, nbf and
// iat: enough for replicas' clocks to differ a little, and small beside
// any access token lifetime (a 3 s token is refused 3 s after issue, not
// a minute later).
const DefaultLocalSkew = 5 * time.Second

// Verifier validates JWT bearer tokens from configured issuers. It is
// safe for concurrent use and starts no goroutines.
type Verifier struct {
	remote map[string]*remoteIssuer // by the exact issuer string
	local  []localIssuer
	hc     *http.Client
	now    func() time.Time
	skew   time.Duration
	log    *slog.Logger
	cache  verifiedCache
}

// Verified tokens are remembered, by the sha256 of resource (and whether
// it takes only its exact audience) and token,
// until their exp but at most verifiedTTL: the signature check is nearly
// all of a JWT caller's cost (about 100 µs for ES256, against about 1 µs
// for a virtual key), and a client sends the same token for minutes. The
// bound keeps a key an issuer withdraws from being honoured for long.
const (
	verifiedTTL  = time.Minute
	verifiedSize = 10000
)

type verifiedEntry struct {
	id    Identity
	until time.Time
}

type verifiedCache struct {
	mu sync.Mutex
	m  map[[32]byte]verifiedEntry
}

func verifiedKey(token, resource string, exact bool) [32]byte {
	h := sha256.New()
	if exact {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	h.Write([]byte(resource))
	h.Write([]byte{0})
	h.Write([]byte(token))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (c *verifiedCache) get(k [32]byte, now time.Time) (*Identity, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	if !now.Before(e.until) {
		delete(c.m, k)
		return nil, false
	}
	id := e.id
	return &id, true
}

func (c *verifiedCache) put(k [32]byte, id *Identity, now time.Time) {
	until := now.Add(verifiedTTL)
	if !id.Expiry.IsZero() && id.Expiry.Before(until) {
		until = id.Expiry
	}
	if !now.Before(until) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[32]byte]verifiedEntry)
	}
	if len(c.m) >= verifiedSize {
		for key, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, key)
			}
		}
		if len(c.m) >= verifiedSize {
			clear(c.m) // a flood of distinct tokens: start over, each is re-verified
		}
	}
	c.m[k] = verifiedEntry{id: *id, until: until}
}

type localIssuer struct {
	match  func(string) bool
	keys   func() jose.JSONWebKeySet
	claims config.ClaimPaths
	algs   []jose.SignatureAlgorithm
	skew   time.Duration
}

// NewVerifier returns a verifier for the issuers in o. It does no network
// I/O: an issuer's metadata and keys are fetched with its first token, so
// the gateway starts while an IdP is down.
func NewVerifier(o VerifierOptions) *Verifier {
	v := &Verifier{
		remote: map[string]*remoteIssuer{},
		hc:     o.HTTPClient,
		now:    o.Now,
		skew:   o.Skew,
		log:    o.Logger,
	}
	if v.hc == nil {
		v.hc = &http.Client{Timeout: DefaultHTTPTimeout, CheckRedirect: sameHostRedirect}
	}
	if v.now == nil {
		v.now = time.Now
	}
	switch {
	case v.skew == 0:
		v.skew = config.DefaultClockSkew
	case v.skew < 0:
		v.skew = 0
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	for _, is := range o.Issuers {
		is.RequiredScopes = append([]string(nil), is.RequiredScopes...)
		v.remote[is.Issuer] = &remoteIssuer{cfg: is, algs: signatureAlgs(is.AlgsOrDefault()), jwksURI: is.JWKSURL}
	}
	for _, l := range o.Local {
		algs := l.Algs
		if len(algs) == 0 {
			algs = []string{string(jose.ES256)}
		}
		skew := l.Skew
		switch {
		case skew == 0:
			skew = DefaultLocalSkew
		case skew < 0:
			skew = 0
		}
		v.local = append(v.local, localIssuer{match: l.Match, keys: l.Keys, claims: l.Claims, algs: signatureAlgs(algs), skew: skew})
	}
	return v
}

// sameHostRedirect lets the default client follow a redirect only to the
// same host and never from https to http: an issuer's documents are its
// own, and a redirect elsewhere is more likely an open redirect than a
// move.
func sameHostRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	switch {
	case len(via) >= 5:
		return errors.New("stopped after 5 redirects")
	case !strings.EqualFold(req.URL.Host, first.Host):
		return errors.New("redirect to another host refused")
	case first.Scheme == "https" && req.URL.Scheme != "https":
		return errors.New("redirect from https to http refused")
	}
	return nil
}

// signatureAlgs converts an allow-list, dropping anything not asymmetric:
// with none or HMAC allowed, a public key (or nothing) could verify a
// forged token.
func signatureAlgs(names []string) []jose.SignatureAlgorithm {
	var out []jose.SignatureAlgorithm
	for _, n := range names {
		if _, ok := keyFits[jose.SignatureAlgorithm(n)]; ok {
			out = append(out, jose.SignatureAlgorithm(n))
		}
	}
	return out
}

// LooksLikeJWT reports whether s is shaped like a JWS compact
// serialization: three base64url segments, the first decoding to a JSON
// object with an "alg". It verifies nothing.
func LooksLikeJWT(s string) bool {
	if len(s) > maxTokenSize || strings.Count(s, ".") != 2 {
		return false
	}
	h, _, _ := strings.Cut(s, ".")
	hdr, ok := decodeHeader(h)
	return ok && hdr.Alg != ""
}

type joseHeader struct {
	Alg string `json:"alg"`
	Enc string `json:"enc"`
}

func decodeHeader(seg string) (joseHeader, bool) {
	var h joseHeader
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil || len(b) == 0 || b[0] != '{' {
		return h, false
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, false
	}
	return h, true
}

// isJWE reports whether s is shaped like a JWE compact serialization
// (five segments, a header with alg and enc).
func isJWE(s string) bool {
	if strings.Count(s, ".") != 4 {
		return false
	}
	h, _, _ := strings.Cut(s, ".")
	hdr, ok := decodeHeader(h)
	return ok && hdr.Alg != "" && hdr.Enc != ""
}

// Verify checks token for use on an MCP route whose resource URL is
// resource (the RFC 8707 / RFC 9728 resource identifier, e.g.
// "https://gw.example/mcp") and returns who it says its bearer is.
//
// The token's aud must name resource ([SameResource]: compared in
// canonical form), or, for an issuer with a configured audience (one
// value for the whole gateway's MCP routes), contain that audience. A
// local issuer's token (mcpgate's own authorization server) has exactly
// one audience, and it must be resource: neither the issuer nor any
// other route is ever good enough.
//
// The error is [ErrNotJWT] for a token not shaped like a JWT, a
// *[TokenError] for an invalid one (401 invalid_token), a *[ScopeError]
// for a valid token without the required scopes (403
// insufficient_scope).
func (v *Verifier) Verify(ctx context.Context, token, resource string) (*Identity, error) {
	return v.verifyCached(ctx, token, resource, false)
}

// VerifyExact is Verify for a resource that only a token issued for that
// very resource may use: the admin API. An issuer's configured audience
// does not count there, since it names the whole gateway and would make
// every token an MCP client holds an admin token.
func (v *Verifier) VerifyExact(ctx context.Context, token, resource string) (*Identity, error) {
	return v.verifyCached(ctx, token, resource, true)
}

func (v *Verifier) verifyCached(ctx context.Context, token, resource string, exact bool) (*Identity, error) {
	key := verifiedKey(token, resource, exact)
	if id, ok := v.cache.get(key, v.now()); ok {
		return id, nil
	}
	id, issuer, err := v.verify(ctx, token, resource, exact)
	if err == nil {
		v.cache.put(key, id, v.now())
	}
	if err != nil {
		var te *TokenError
		var se *ScopeError
		switch {
		case errors.As(err, &te):
			args := []any{logIssuer, issuer, logReason, te.Description}
			if te.Err != nil {
				args = append(args, logError, te.Err)
			}
			v.log.DebugContext(ctx, "oauth: token rejected", args...)
		case errors.As(err, &se):
			v.log.DebugContext(ctx, "oauth: token lacks required scopes", logIssuer, issuer, "required", se.Required)
		}
	}
	return id, err
}

// verify returns the issuer the token was matched to (the configured
// string, never the unverified claim) for the log.
func (v *Verifier) verify(ctx context.Context, token, resource string, exact bool) (*Identity, string, error) {
	if len(token) > maxTokenSize {
		return nil, "", tokenError("token too large", nil)
	}
	if isJWE(token) {
		return nil, "", tokenError("encrypted tokens (JWE) are not accepted", nil)
	}
	if !LooksLikeJWT(token) {
		return nil, "", ErrNotJWT
	}
	_, rest, _ := strings.Cut(token, ".")
	payloadSeg, _, _ := strings.Cut(rest, ".")
	payload, err := base64.RawURLEncoding.DecodeString(payloadSeg)
	if err != nil {
		return nil, "", tokenError("malformed token payload", nil)
	}
	claims, err := decodeClaims(payload)
	if err != nil {
		return nil, "", tokenError("token payload is not a JSON object", nil)
	}
	iss, _ := claims["iss"].(string)
	if iss == "" {
		return nil, "", tokenError("token has no issuer (iss)", nil)
	}

	// Which issuer: its algorithms, keys and claim rules.
	var (
		algs   []jose.SignatureAlgorithm
		remote *remoteIssuer
		local  *localIssuer
		issuer string
	)
	for i := range v.local {
		if v.local[i].match != nil && v.local[i].match(iss) {
			local, algs, issuer = &v.local[i], v.local[i].algs, iss
			break
		}
	}
	if local == nil {
		if remote = v.remote[iss]; remote == nil {
			return nil, "", tokenError("token issuer is not accepted", nil)
		}
		algs, issuer = remote.algs, remote.cfg.Issuer
	}
	if len(algs) == 0 {
		return nil, issuer, tokenError("no signature algorithm is allowed for the token's issuer", nil)
	}

	jws, err := jose.ParseSignedCompact(token, algs)
	if err != nil {
		var ua *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &ua) {
			return nil, issuer, tokenError("token signature algorithm is not allowed for its issuer", nil)
		}
		return nil, issuer, tokenError("malformed token", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, issuer, tokenError("token must carry exactly one signature", nil)
	}
	hdr := jws.Signatures[0].Header
	// A JWT's payload is always base64url (RFC 7519), and no extension
	// this verifier does not implement may be critical.
	for _, k := range []jose.HeaderKey{"crit", "b64"} {
		if _, ok := hdr.ExtraHeaders[k]; ok {
			return nil, issuer, tokenError("token uses an unsupported header parameter", nil)
		}
	}
	alg := jose.SignatureAlgorithm(hdr.Algorithm)

	// The keys come only from the issuer's JWKS (or the local set); the
	// header's jwk, jku, x5u and x5c are never looked at.
	var keys []jose.JSONWebKey
	var fetchErr error
	if local != nil {
		if local.keys != nil {
			keys = usableKeys(local.keys())
		}
	} else {
		keys, fetchErr = v.remoteKeys(ctx, remote, hdr.KeyID, alg)
	}
	candidates := candidateKeys(keys, hdr.KeyID, alg)
	if len(candidates) == 0 {
		if fetchErr != nil || (local == nil && keys == nil) {
			return nil, issuer, tokenError("issuer keys unavailable", fetchErr)
		}
		return nil, issuer, tokenError("token signed with an unknown key", nil)
	}
	var verified []byte
	for _, k := range candidates {
		if out, err := jws.Verify(k); err == nil {
			verified = out
			break
		}
	}
	if verified == nil || !bytes.Equal(verified, payload) {
		return nil, issuer, tokenError("token signature is invalid", nil)
	}

	// From here on the claims are the issuer's.
	skew := v.skew
	if local != nil {
		skew = local.skew
	}
	if err := v.checkTimes(claims, skew); err != nil {
		return nil, issuer, err
	}
	aud, ok := stringOrList(claims["aud"])
	if !ok || len(aud) == 0 {
		return nil, issuer, tokenError("token has no audience (aud)", nil)
	}
	var paths config.ClaimPaths
	if local != nil {
		// mcpgate's own tokens name exactly one resource (S22.4).
		if len(aud) != 1 || !SameResource(aud[0], resource) {
			return nil, issuer, tokenError("token audience is not this resource", nil)
		}
		paths = local.claims
	} else {
		ok := slices.ContainsFunc(aud, func(a string) bool { return SameResource(a, resource) })
		if want := remote.cfg.Audience; !ok && want != "" && !exact {
			ok = contains(aud, want)
		}
		if !ok {
			return nil, issuer, tokenError("token audience does not include this resource", nil)
		}
		paths = remote.cfg.Claims
	}

	id, err := identity(claims, iss, paths, local != nil)
	if err != nil {
		return nil, issuer, err
	}
	if remote != nil {
		if missing := missingScopes(remote.cfg.RequiredScopes, id.Scopes); len(missing) > 0 {
			return nil, issuer, &ScopeError{Required: append([]string(nil), remote.cfg.RequiredScopes...)}
		}
	}
	return id, issuer, nil
}

// checkTimes applies exp (required), nbf and iat with the skew.
func (v *Verifier) checkTimes(claims map[string]any, skew time.Duration) error {
	now := v.now()
	exp, ok, err := numericDate(claims, "exp")
	switch {
	case err != nil:
		return tokenError("token exp claim is invalid", nil)
	case !ok:
		return tokenError("token has no expiry (exp)", nil)
	case !now.Before(exp.Add(skew)):
		return tokenError("token expired", nil)
	}
	if nbf, ok, err := numericDate(claims, "nbf"); err != nil {
		return tokenError("token nbf claim is invalid", nil)
	} else if ok && now.Add(skew).Before(nbf) {
		return tokenError("token is not valid yet (nbf)", nil)
	}
	if iat, ok, err := numericDate(claims, "iat"); err != nil {
		return tokenError("token iat claim is invalid", nil)
	} else if ok && now.Add(skew).Before(iat) {
		return tokenError("token issued in the future (iat)", nil)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func missingScopes(required, have []string) []string {
	var missing []string
	for _, r := range required {
		if !contains(have, r) {
			missing = append(missing, r)
		}
	}
	return missing
}
