package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// minRSABits refuses RSA keys too short to trust.
const minRSABits = 2048

// keyFits says, per accepted algorithm, which public keys may verify it:
// the key's type (and curve) must agree with the token's alg, so an RSA key
// never checks an ES256 signature and no symmetric key is ever used. An
// algorithm missing here is never accepted.
var keyFits = map[jose.SignatureAlgorithm]func(any) bool{
	jose.RS256: isRSA, jose.RS384: isRSA, jose.RS512: isRSA,
	jose.PS256: isRSA, jose.PS384: isRSA, jose.PS512: isRSA,
	jose.ES256: isCurve(elliptic.P256()),
	jose.ES384: isCurve(elliptic.P384()),
	jose.ES512: isCurve(elliptic.P521()),
	jose.EdDSA: func(k any) bool { _, ok := k.(ed25519.PublicKey); return ok },
}

func isRSA(k any) bool {
	r, ok := k.(*rsa.PublicKey)
	return ok && r.N != nil && r.N.BitLen() >= minRSABits
}

func isCurve(c elliptic.Curve) func(any) bool {
	return func(k any) bool {
		e, ok := k.(*ecdsa.PublicKey)
		return ok && e.Curve == c
	}
}

// usableKeys keeps the public signature keys of a set: private halves are
// dropped (a JWKS should not have them, but then only the public half is
// needed), encryption keys (use "enc") and symmetric ones are skipped.
func usableKeys(set jose.JSONWebKeySet) []jose.JSONWebKey {
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub := k.Public()
		if !pub.Valid() || !pub.IsPublic() {
			continue
		}
		for _, fits := range keyFits {
			if fits(pub.Key) {
				out = append(out, pub)
				break
			}
		}
	}
	return out
}

// candidateKeys returns the raw public keys that may verify a token with
// this kid and alg: the key's kid must match when the token has one, its
// alg (if it says) must be the token's, and its type must fit the alg.
func candidateKeys(keys []jose.JSONWebKey, kid string, alg jose.SignatureAlgorithm) []any {
	fits := keyFits[alg]
	if fits == nil {
		return nil
	}
	var out []any
	for _, k := range keys {
		if (kid != "" && k.KeyID != kid) || (k.Algorithm != "" && k.Algorithm != string(alg)) || !fits(k.Key) {
			continue
		}
		if out = append(out, k.Key); len(out) == maxCandidateKeys {
			break
		}
	}
	return out
}

// knows reports whether keys have what a token with kid and alg needs;
// if not, the issuer may have rotated and a re-fetch is due.
func knows(keys []jose.JSONWebKey, kid string, alg jose.SignatureAlgorithm) bool {
	if kid == "" {
		return len(candidateKeys(keys, "", alg)) > 0
	}
	for _, k := range keys {
		if k.KeyID == kid {
			return true
		}
	}
	return false
}

// remoteIssuer is a configured OIDC issuer and its cached keys.
type remoteIssuer struct {
	cfg  config.OIDCIssuer
	algs []jose.SignatureAlgorithm

	mu        sync.Mutex
	jwksURI   string            // configured, or discovered by the first fetch
	keys      []jose.JSONWebKey // usable public keys; nil until a fetch succeeds
	keysAt    time.Time         // when keys were fetched
	tried     time.Time         // the last fetch
	refetched time.Time         // the last fetch made while there were keys
	lastErr   error             // the last fetch's error
	inflight  *fetchCall        // the fetch running, if any
}

// fetchCall is a fetch that concurrent verifications wait for.
type fetchCall struct {
	done chan struct{}
	// abandoned: the caller that ran it gave up (its context ended), so
	// it says nothing about the issuer and a waiter fetches again.
	abandoned bool
}

// remoteKeys returns the issuer's keys for a token with kid and alg.
//
// It fetches them when there are none yet, or when kid is unknown (the
// issuer rotated) or the keys are older than keysMaxAge; a call fetches at
// most once, concurrent calls share one fetch, a failed first fetch is
// retried no sooner than refetchInterval later, and with keys in hand a
// re-fetch happens at most once per refetchInterval. err is the last
// fetch's error when it failed; keys may then still be the earlier ones.
func (v *Verifier) remoteKeys(ctx context.Context, r *remoteIssuer, kid string, alg jose.SignatureAlgorithm) ([]jose.JSONWebKey, error) {
	fetched := false // this call ran or waited for a fetch
	r.mu.Lock()
	for {
		now := v.now()
		if r.keys != nil && now.Sub(r.keysAt) < keysMaxAge && knows(r.keys, kid, alg) {
			keys := r.keys
			r.mu.Unlock()
			return keys, nil
		}
		if c := r.inflight; c != nil {
			r.mu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			r.mu.Lock()
			fetched = fetched || !c.abandoned
			continue
		}
		last := r.tried
		if r.keys != nil {
			last = r.refetched
		}
		if fetched || (!last.IsZero() && now.Sub(last) < refetchInterval) {
			keys, err := r.keys, r.lastErr
			r.mu.Unlock()
			return keys, err
		}

		c := &fetchCall{done: make(chan struct{})}
		r.inflight = c
		uri, refetch := r.jwksURI, r.keys != nil
		r.mu.Unlock()
		keys, uri, err := v.fetchKeys(ctx, r.cfg.Issuer, uri)
		r.mu.Lock()
		r.inflight = nil
		if err != nil && ctx.Err() != nil {
			// This caller gave up, not the issuer: the attempt does not
			// count, and a waiter that still wants the keys fetches them.
			c.abandoned = true
			close(c.done)
			keys := r.keys
			r.mu.Unlock()
			return keys, err
		}
		close(c.done)
		fetched = true
		r.tried, r.lastErr = now, err
		if refetch {
			r.refetched = now
		}
		if uri != "" {
			r.jwksURI = uri
		}
		if err != nil {
			// At most once per refetchInterval, since attempts are.
			v.log.WarnContext(ctx, "oauth: issuer keys unavailable", logIssuer, r.cfg.Issuer, logError, err)
		} else {
			r.keys, r.keysAt = keys, now
			v.log.DebugContext(ctx, "oauth: fetched issuer keys", logIssuer, r.cfg.Issuer, "keys", len(keys))
		}
	}
}

// fetchKeys discovers the JWKS URI unless it is known, and fetches the
// keys, within one DefaultHTTPTimeout. uri is the JWKS URI used, also
// when fetching the JWKS failed.
func (v *Verifier) fetchKeys(ctx context.Context, issuer, jwksURI string) (keys []jose.JSONWebKey, uri string, err error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultHTTPTimeout)
	defer cancel()
	if jwksURI == "" {
		if jwksURI, err = v.discover(ctx, issuer); err != nil {
			return nil, "", err
		}
	}
	keys, err = v.fetchJWKS(ctx, jwksURI)
	return keys, jwksURI, err
}

// discoveryURLs are where an issuer's metadata may be: OpenID Connect
// discovery (appended to the issuer), then RFC 8414 (inserted before the
// issuer's path, then appended, as some servers do).
func discoveryURLs(issuer string) []string {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil
	}
	trimmed := strings.TrimSuffix(issuer, "/")
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	out := []string{
		trimmed + "/.well-known/openid-configuration",
		u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + path,
	}
	if path != "" {
		out = append(out, trimmed+"/.well-known/oauth-authorization-server")
	}
	return out
}

// discover returns the jwks_uri of the first metadata document that names
// issuer exactly as its issuer (OpenID Connect discovery 4.3, RFC 8414
// section 3.3: a document for another issuer is not this issuer's).
func (v *Verifier) discover(ctx context.Context, issuer string) (string, error) {
	var errs []error
	for _, u := range discoveryURLs(issuer) {
		body, err := v.get(ctx, u)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		jwks, err := jwksURIOf(body, issuer)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
			continue
		}
		return jwks, nil
	}
	return "", fmt.Errorf("discover %s: %w", issuer, errors.Join(errs...))
}

// jwksURIOf decodes a metadata document and returns its jwks_uri when it
// is issuer's (FuzzDiscoveryDocument).
func jwksURIOf(body []byte, issuer string) (string, error) {
	// Members are matched by their exact names, as OpenID Connect
	// Discovery and RFC 8414 spell them: encoding/json's struct decoding
	// would also take "Issuer" or "JWKS_URI", so a document could name
	// its issuer under a key no conforming reader sees. A member of an
	// unexpected type counts as absent (IdPs add odd extensions, and only
	// issuer and jwks_uri matter here).
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return "", err
	}
	var iss, uri string
	_ = json.Unmarshal(doc["issuer"], &iss)
	_ = json.Unmarshal(doc["jwks_uri"], &uri)
	switch {
	case iss != issuer:
		return "", fmt.Errorf("names issuer %q, not %q", truncate(iss, 200), issuer)
	case !fetchableURL(uri):
		return "", errors.New("jwks_uri missing, or not https")
	}
	return uri, nil
}

// fetchJWKS fetches a JWK set, keeping the keys it can use and skipping
// the others (a set may hold encryption keys or types this verifier does
// not know, which must not hide the good ones).
func (v *Verifier) fetchJWKS(ctx context.Context, uri string) ([]jose.JSONWebKey, error) {
	body, err := v.get(ctx, uri)
	if err != nil {
		return nil, err
	}
	keys, err := decodeJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("jwks %s: %w", uri, err)
	}
	return keys, nil
}

// decodeJWKS decodes a JWK set into its usable signing keys (FuzzJWKS).
func decodeJWKS(body []byte) ([]jose.JSONWebKey, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if k.UnmarshalJSON(r) == nil {
			set.Keys = append(set.Keys, k)
		}
	}
	keys := usableKeys(set)
	if len(keys) == 0 {
		return nil, fmt.Errorf("no usable signing key among %d", len(raw.Keys))
	}
	return keys, nil
}

// get fetches a document of at most maxDocumentSize with status 200.
func (v *Verifier) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentSize+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxDocumentSize {
		return nil, fmt.Errorf("GET %s: larger than %d bytes", u, maxDocumentSize)
	}
	return body, nil
}

// fetchableURL accepts https URLs, and http ones on a loopback host (the
// rule config applies to issuers).
func fetchableURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil || u.Fragment != "" {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		return netaddr.IsLoopbackHost(u.Hostname())
	}
	return false
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
