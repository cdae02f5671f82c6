package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

const (
	// MaxDocument bounds every response body read: metadata documents,
	// registration and token responses.
	MaxDocument = 1 << 20
	// FetchTimeout bounds every request, from dial to the end of the body.
	FetchTimeout = 10 * time.Second
	// maxErrorBody is what is read of an error answer before closing.
	maxErrorBody = 64 << 10
)

// The refusals the guard and the fetches make; errors wrap them.
var (
	// ErrBlockedAddress: the dialled address is loopback, private or
	// otherwise not public, for an upstream that is public.
	ErrBlockedAddress = errors.New("address not allowed for this upstream")
	// ErrCrossOrigin: a redirect to another origin, not followed.
	ErrCrossOrigin = errors.New("redirect to another origin refused")
	// ErrTooLarge: a response body over MaxDocument.
	ErrTooLarge = errors.New("response exceeds the size limit")
	// ErrInsecureURL: not https (and not http on loopback for a loopback
	// http upstream), or with user info or a fragment.
	ErrInsecureURL = errors.New("not an https URL")
)

// privateHost reports whether the upstream's host is itself not public:
// localhost, or an IP literal that is not a public address
// (netaddr.IsNonPublicHost). A DNS name
// counts as public: what it resolves to is its owner's choice, so it
// cannot vouch for itself (Config.AllowPrivate can).
func privateHost(h string) bool { return netaddr.IsNonPublicHost(h) }

func loopbackHost(h string) bool { return netaddr.IsLoopbackHost(h) }

// fetcher makes the package's requests on an upstream's behalf.
type fetcher struct {
	follow    *http.Client // same-origin redirects only: metadata
	noFollow  *http.Client // no redirects: registration and token requests
	allowHTTP bool         // the upstream is http on loopback
}

// newFetcher builds the clients for an upstream at server. hc nil means
// a transport of the package's own; a given client's *http.Transport is
// cloned with its dialer replaced by the guarded one and no proxy
// (through a proxy the dialled address would be the proxy's). Another
// RoundTripper cannot be guarded, so it is refused unless the guard is
// off (a private upstream, or AllowPrivate).
func newFetcher(server *url.URL, hc *http.Client, allowPrivate bool) (*fetcher, error) {
	guard := !allowPrivate && !privateHost(server.Hostname())
	base := http.Client{}
	if hc != nil {
		base = *hc
	}
	var tr *http.Transport
	switch t := base.Transport.(type) {
	case nil:
		tr = &http.Transport{
			TLSHandshakeTimeout:   FetchTimeout,
			ResponseHeaderTimeout: FetchTimeout,
			MaxIdleConns:          16,
			IdleConnTimeout:       30 * time.Second,
			ForceAttemptHTTP2:     true,
		}
	case *http.Transport:
		tr = t.Clone()
	default:
		if guard {
			return nil, errors.New("oauth client: HTTPClient.Transport must be an *http.Transport, which the address guard can wrap")
		}
	}
	if tr != nil {
		// Whatever the upstream's class, an address its documents name is
		// never link-local or a cloud metadata service's.
		tr.DialContext = oauth.DialRefusing(&net.Dialer{Timeout: FetchTimeout}, netaddr.MetadataAddr, ErrBlockedAddress)
		if guard {
			tr.Proxy = nil
			tr.DialContext = oauth.DialPublic(FetchTimeout, ErrBlockedAddress)
		}
		tr.DialTLSContext = nil
		base.Transport = tr
	}
	if base.Timeout == 0 || base.Timeout > FetchTimeout {
		base.Timeout = FetchTimeout
	}
	base.Jar = nil
	follow, noFollow := base, base
	follow.CheckRedirect = sameOriginRedirect
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &fetcher{
		follow:    &follow,
		noFollow:  &noFollow,
		allowHTTP: server.Scheme == "http" && loopbackHost(server.Hostname()),
	}, nil
}

// MetadataClient is the client this package fetches an upstream's
// metadata with, for other fetchers of OAuth metadata on an upstream's
// behalf to share its rules: hc's transport with the address guard of the
// upstream's class (see Config.AllowPrivate) and no proxy, redirects
// followed within the origin only (ErrCrossOrigin otherwise), each request
// bounded by FetchTimeout. The caller bounds what it reads (MaxDocument).
func MetadataClient(serverURL string, hc *http.Client, allowPrivate bool) (*http.Client, error) {
	metadata, _, err := UpstreamClients(serverURL, hc, allowPrivate)
	return metadata, err
}

// UpstreamClients is MetadataClient and, on the same transport (the same
// address guard, hc's TLS settings, no proxy, FetchTimeout), a client
// that follows no redirect at all (a 3xx answer is returned as is): the
// one for a token request to an endpoint that an upstream's metadata
// named, which carries the gateway's client credentials, so that a public
// upstream cannot have them sent to a loopback or private address.
func UpstreamClients(serverURL string, hc *http.Client, allowPrivate bool) (metadata, noRedirect *http.Client, err error) {
	su, err := url.Parse(serverURL)
	if err != nil || su.Host == "" {
		return nil, nil, errors.New("oauth client: the server url is not an absolute URL")
	}
	f, err := newFetcher(su, hc, allowPrivate)
	if err != nil {
		return nil, nil, err
	}
	return f.follow, f.noFollow, nil
}

// sameOriginRedirect follows a redirect only within the origin of the
// original request; the destination of any other is never contacted.
func sameOriginRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if !sameOrigin(req.URL, via[0].URL) {
		return ErrCrossOrigin
	}
	return nil
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// checkURL parses u and checks that this upstream's fetches may use it:
// https, or http on a loopback host when the upstream is; no user info or
// fragment.
func (f *fetcher) checkURL(u string) (*url.URL, error) {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.User != nil || p.Fragment != "" {
		return nil, fmt.Errorf("%w: %s", ErrInsecureURL, redactURL(u))
	}
	switch {
	case p.Scheme == "https":
		return p, nil
	case p.Scheme == "http" && f.allowHTTP && loopbackHost(p.Hostname()):
		return p, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrInsecureURL, redactURL(u))
}

// getJSON GETs u into v. found is false for a 4xx answer (not there);
// every other failure is an error.
func (f *fetcher) getJSON(ctx context.Context, u string, v any) (found bool, err error) {
	if _, err := f.checkURL(u); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, fmt.Errorf("%w: %s", ErrInsecureURL, redactURL(u))
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.follow.Do(req)
	if err != nil {
		return false, fmt.Errorf("GET %s: %w", redactURL(u), scrubURLError(err))
	}
	defer resp.Body.Close()
	switch st := resp.StatusCode; {
	case st >= 400 && st < 500:
		drain(resp.Body)
		return false, nil
	case st != http.StatusOK:
		drain(resp.Body)
		return false, fmt.Errorf("GET %s: HTTP %d", redactURL(u), st)
	}
	data, err := readBounded(resp.Body)
	if err != nil {
		return false, fmt.Errorf("GET %s: %w", redactURL(u), err)
	}
	if err := decodeObject(data, v); err != nil {
		return false, fmt.Errorf("GET %s: %w", redactURL(u), err)
	}
	return true, nil
}

// post sends a request that carries credentials: never redirected.
func (f *fetcher) post(ctx context.Context, u, contentType string, body string, edit func(*http.Request)) (status int, data []byte, err error) {
	if _, err := f.checkURL(u); err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s", ErrInsecureURL, redactURL(u))
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	if edit != nil {
		edit(req)
	}
	resp, err := f.noFollow.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("POST %s: %w", redactURL(u), scrubURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 {
		drain(resp.Body)
		return resp.StatusCode, nil, fmt.Errorf("POST %s: HTTP %d redirect, not followed", redactURL(u), resp.StatusCode)
	}
	data, err = readBounded(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("POST %s: %w", redactURL(u), err)
	}
	return resp.StatusCode, data, nil
}

func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, maxErrorBody)) }

func readBounded(r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxDocument+1))
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(data) > MaxDocument {
		return nil, fmt.Errorf("%w (%d bytes)", ErrTooLarge, MaxDocument)
	}
	return data, nil
}

// decodeObject unmarshals a JSON object into v. A field of an unexpected
// type is skipped rather than failing the document: only a few fields
// matter, and those are checked where they are used.
func decodeObject(data []byte, v any) error {
	var te *json.UnmarshalTypeError
	if err := json.Unmarshal(data, v); err != nil && !errors.As(err, &te) {
		return errors.New("not a JSON object")
	}
	if t := strings.TrimSpace(string(data)); !strings.HasPrefix(t, "{") {
		return errors.New("not a JSON object")
	}
	return nil
}

// redactURL is raw without user info, query and fragment: fit for logs
// and errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}

// scrubURLError drops the *url.Error wrapper, whose message repeats the
// whole URL, query included.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// sanitize keeps the RFC 6749 error_description charset and at most n
// bytes, turning anything else into '?'.
func sanitize(v string, n int) string {
	v = strings.TrimSpace(v)
	if len(v) > n {
		v = v[:n]
	}
	b := []byte(v)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '?'
		}
	}
	return string(b)
}
