package upstream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
	oauthclient "github.com/mcpgate/mcpgate/internal/oauth/client"
)

// Where the gateway's own client credentials go (oauth2 client
// credentials, oauth2_token_exchange, enterprise_managed): only to a token
// endpoint the config names. That is token_url, or the token_endpoint of
// the authorization server the config pins (auth.authorization_server),
// read from that server's own metadata (RFC 8414, or OpenID Connect
// discovery), whose issuer must be exactly the pinned one. An upstream's
// protected resource metadata (RFC 9728) is never used for them: it may
// name any authorization server, which would then receive the client
// secret or assertion and, for a token exchange, the caller's own token.
// The config refuses a block with neither (config.Auth validation); the
// check here holds for a tokenSource built without it.
//
// The pinned authorization server is the operator's word, like token_url:
// it is fetched with the server's token client (the configured one, else
// the package's), redirects followed within its origin only, https unless
// the issuer is http on a loopback host; the token request never follows
// a redirect. Every fetch is bounded in time and size.
//
// Errors reach callers (through the gateway's JSON-RPC errors): they name
// what failed by its role, never an address; the URL and the network
// cause go to the log (roleError).

const (
	// maxDiscoveryDocument bounds each metadata document.
	maxDiscoveryDocument = 1 << 20
	// discoveryFetchTimeout bounds each metadata fetch.
	discoveryFetchTimeout = 10 * time.Second
)

// canonicalResource is the server url's canonical URI (RFC 8707 2).
func canonicalResource(raw string) (string, error) { return oauthclient.CanonicalResource(raw) }

// roleError is a token source failure whose message names what failed by
// its role (the authorization server's metadata, the token endpoint) and
// no address: callers see it. detail, with the URL and the full cause,
// is for the log.
type roleError struct {
	msg    string
	detail string
	cause  error
}

func (e *roleError) Error() string { return e.msg }
func (e *roleError) Unwrap() error { return e.cause }

// errorDetail is what the log records of err: a roleError's detail, else
// the message.
func errorDetail(err error) string {
	var re *roleError
	if errors.As(err, &re) && re.detail != "" {
		return re.detail
	}
	return err.Error()
}

// failAt is a failure at address u (redacted in the detail only).
func (s *tokenSource) failAt(kind Kind, status int, u string, cause error, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	detail := msg + " (" + redactURL(u) + ")"
	if cause != nil {
		detail += ": " + scrubURLError(cause).Error()
	}
	return &Error{Server: s.server, Kind: kind, Status: status, Err: &roleError{msg: msg, detail: detail, cause: cause}}
}

// endpoint is the token endpoint and the audience of a client assertion
// for it: the configured token_url and that URL, or the pinned
// authorization server's token endpoint, read once, and its issuer
// identifier (a failed read is tried again by the next mint).
func (s *tokenSource) endpoint(ctx context.Context) (ep, aud string, err error) {
	if s.tokenURL != "" {
		return s.tokenURL, s.tokenURL, nil
	}
	s.mu.Lock()
	ep, aud = s.discovered, s.issuer
	s.mu.Unlock()
	if ep != "" {
		return ep, aud, nil
	}
	ep, aud, err = s.discover(ctx)
	if err != nil {
		return "", "", err
	}
	s.log.Debug("oauth2 token endpoint read from the authorization server's metadata", "server", s.server, "token_endpoint", redactURL(ep))
	s.mu.Lock()
	s.discovered, s.issuer = ep, aud
	s.mu.Unlock()
	return ep, aud, nil
}

// discover reads the token endpoint from the metadata of the pinned
// authorization server, whose issuer it returns.
func (s *tokenSource) discover(ctx context.Context) (endpoint, issuer string, err error) {
	issuer = s.auth.AuthorizationServer
	if issuer == "" {
		return "", "", s.fail(KindAuth, 0, "%s: neither token_url nor authorization_server is configured; the gateway sends its client credentials only to a token endpoint the config names, never to one the server's metadata names", s.label)
	}
	iu, ok := fetchable(issuer, true)
	if !ok || iu.RawQuery != "" {
		return "", "", s.fail(KindAuth, 0, "%s: authorization_server is not an https URL without query or fragment (http only on a loopback host)", s.label)
	}
	var md struct {
		Issuer        string `json:"issuer"`
		TokenEndpoint string `json:"token_endpoint"`
	}
	from, err := s.fetchFirst(ctx, oauthclient.AuthServerMetadataURLs(iu), &md)
	if err != nil {
		return "", "", err
	}
	// RFC 8414 3.3: a document for another issuer is not this one's.
	if md.Issuer != issuer {
		return "", "", s.failAt(KindAuth, 0, from, nil, "authorization server metadata names issuer %q, not the configured authorization_server", clipASCII(sanitizeOAuthText(md.Issuer), 200))
	}
	// The token endpoint is as https as its issuer.
	if _, ok := fetchable(md.TokenEndpoint, iu.Scheme == "http"); !ok {
		return "", "", s.failAt(KindAuth, 0, from, nil, "authorization server metadata: token_endpoint missing, or not an https URL")
	}
	return md.TokenEndpoint, issuer, nil
}

// fetchFirst fetches the candidates in order into v, moving on only when
// one answers a 4xx status (not there); any other failure (network, 5xx,
// a redirect to another origin, an oversized or malformed document) ends
// the search. It returns the URL v came from.
func (s *tokenSource) fetchFirst(ctx context.Context, candidates []string, v any) (string, error) {
	var missing []string
	for _, u := range candidates {
		found, err := s.fetchJSON(ctx, u, v)
		if err != nil {
			return "", err
		}
		if found {
			return u, nil
		}
		missing = append(missing, redactURL(u))
	}
	return "", &Error{Server: s.server, Kind: KindAuth, Err: &roleError{
		msg:    "no authorization server metadata at the configured authorization_server (RFC 8414 or OpenID Connect discovery)",
		detail: "no authorization server metadata at " + strings.Join(missing, ", ")}}
}

// fetchJSON GETs u into v, within discoveryFetchTimeout and
// maxDiscoveryDocument; found is false for a 4xx answer.
func (s *tokenSource) fetchJSON(ctx context.Context, u string, v any) (found bool, err error) {
	const what = "authorization server metadata"
	ctx, cancel := context.WithTimeout(ctx, discoveryFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, s.failAt(KindInternal, 0, u, nil, "%s: invalid URL", what)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.metaHC.Do(req)
	if err != nil {
		var rerr *redirectError
		if errors.As(err, &rerr) {
			return false, s.failAt(KindAuth, 0, u, err, "%s: redirect to another origin, not followed", what)
		}
		return false, s.failAt(KindUnreachable, 0, u, err, "%s: %s", what, netCause(err))
	}
	defer resp.Body.Close()
	switch st := resp.StatusCode; {
	case st >= 400 && st < 500:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return false, nil
	case st != http.StatusOK:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		kind := KindInvalidResponse
		if st >= 500 {
			kind = KindUnreachable
		}
		return false, s.failAt(kind, st, u, nil, "%s answered HTTP %d", what, st)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryDocument+1))
	if err != nil {
		return false, s.failAt(KindUnreachable, 0, u, err, "%s: read: %s", what, netCause(err))
	}
	if len(data) > maxDiscoveryDocument {
		return false, s.failAt(KindInvalidResponse, resp.StatusCode, u, nil, "%s exceeds %d bytes", what, maxDiscoveryDocument)
	}
	// A field of an unexpected type is skipped: only a few fields matter.
	var te *json.UnmarshalTypeError
	if err := json.Unmarshal(data, v); err != nil && !errors.As(err, &te) {
		return false, s.failAt(KindInvalidResponse, resp.StatusCode, u, nil, "%s is not a JSON object", what)
	}
	return true, nil
}

// netCause says why a request failed in words that name no address: the
// kind of failure, never the host, IP or port it happened at.
func netCause(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var sysErr *os.SyscallError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &dnsErr):
		return "the name does not resolve"
	case errors.As(err, &certErr), errors.As(err, &recErr):
		return "TLS handshake failed"
	case errors.Is(err, ErrAddressRefused):
		return ErrAddressRefused.Error()
	case errors.As(err, &sysErr):
		return sysErr.Err.Error() // "connection refused", "connection reset by peer"
	case errors.As(err, &opErr):
		return opErr.Op + " failed"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "the connection was closed"
	}
	return "the request failed"
}

// fetchable parses u and reports whether discovery may use it: https, or
// http on a loopback host when allowHTTP; no userinfo or fragment.
func fetchable(u string, allowHTTP bool) (*url.URL, bool) {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.User != nil || p.Fragment != "" {
		return nil, false
	}
	switch p.Scheme {
	case "https":
		return p, true
	case "http":
		return p, allowHTTP && loopbackHost(p.Hostname())
	}
	return nil, false
}

func loopbackHost(h string) bool { return netaddr.IsLoopbackHost(h) }
