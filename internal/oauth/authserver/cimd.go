package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Client ID metadata documents (draft-ietf-oauth-client-id-metadata-document):
// a client_id that is an https URL names a JSON document, served by the
// client, that says what a registration would.
const (
	metadataTimeout    = 5 * time.Second
	metadataMaxSize    = 64 << 10
	metadataMaxAge     = 10 * time.Minute
	metadataDefaultAge = 5 * time.Minute
	metadataMaxEntries = 1000
)

// errBlockedAddress is what the dialer's guard returns; it surfaces inside
// the fetch error.
var errBlockedAddress = errors.New("address not allowed for client metadata")

// newMetadataClient builds the client that fetches metadata documents,
// with the address guard of every fetch on someone else's behalf
// (oauth.DialPublic) unless allowPrivate. There is no proxy: through one,
// the dialled address would be the proxy's.
func newMetadataClient(allowPrivate bool) (*http.Client, *http.Transport) {
	dial := (&net.Dialer{Timeout: metadataTimeout}).DialContext
	if !allowPrivate {
		dial = oauth.DialPublic(metadataTimeout, errBlockedAddress)
	}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		TLSHandshakeTimeout:   metadataTimeout,
		ResponseHeaderTimeout: metadataTimeout,
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{Transport: tr, Timeout: metadataTimeout}, tr
}

type metadataEntry struct {
	client  *client
	expires time.Time
}

// metadataFetcher fetches, checks and caches metadata documents.
type metadataFetcher struct {
	hc           *http.Client
	allowPrivate bool
	now          func() time.Time

	mu    sync.Mutex
	cache map[string]metadataEntry
}

func newMetadataFetcher(hc *http.Client, allowPrivate bool, now func() time.Time) *metadataFetcher {
	c := *hc
	// A redirect would let a public URL lead the fetch to any address,
	// and the document must be served at its own URL anyway.
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &metadataFetcher{hc: &c, allowPrivate: allowPrivate, now: now, cache: map[string]metadataEntry{}}
}

// get returns the client a metadata document URL describes. Failures are
// invalid_client errors whose description is safe to show.
func (f *metadataFetcher) get(ctx context.Context, id string) (*client, error) {
	if err := checkMetadataURL(id, f.allowPrivate); err != nil {
		return nil, errBadClient(err.Error())
	}
	now := f.now()
	f.mu.Lock()
	e, ok := f.cache[id]
	f.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.client, nil
	}
	c, maxAge, err := f.fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	if maxAge > 0 {
		f.mu.Lock()
		if len(f.cache) >= metadataMaxEntries {
			f.evictLocked(now)
		}
		f.cache[id] = metadataEntry{client: c, expires: now.Add(maxAge)}
		f.mu.Unlock()
	}
	return c, nil
}

// evictLocked drops expired entries and, if that frees nothing, one
// arbitrary entry (map order), so the cache stays bounded.
func (f *metadataFetcher) evictLocked(now time.Time) {
	for k, e := range f.cache {
		if !now.Before(e.expires) {
			delete(f.cache, k)
		}
	}
	for k := range f.cache {
		if len(f.cache) < metadataMaxEntries {
			break
		}
		delete(f.cache, k)
	}
}

func (f *metadataFetcher) sweep(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, e := range f.cache {
		if !now.Before(e.expires) {
			delete(f.cache, k)
		}
	}
}

func (f *metadataFetcher) fetch(ctx context.Context, id string) (*client, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, metadataTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, id, nil)
	if err != nil {
		return nil, 0, errBadClient("the client_id URL is not valid")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.hc.Do(req)
	if err != nil {
		desc := "the client metadata document could not be fetched"
		if errors.Is(err, errBlockedAddress) {
			desc = "the client metadata document is on an address that is not allowed"
		}
		return nil, 0, errBadClient(desc, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, errBadClient(fmt.Sprintf("the client metadata document URL answered %d", resp.StatusCode))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, metadataMaxSize+1))
	if err != nil {
		return nil, 0, errBadClient("the client metadata document could not be read", err)
	}
	if len(body) > metadataMaxSize {
		return nil, 0, errBadClient("the client metadata document is larger than 64 KiB")
	}
	c, err := parseMetadataDocument(id, body)
	if err != nil {
		return nil, 0, errBadClient(err.Error())
	}
	return c, cacheLifetime(resp.Header.Get("Cache-Control")), nil
}

// parseMetadataDocument checks a fetched document against its URL. The
// error is safe to show.
func parseMetadataDocument(id string, body []byte) (*client, error) {
	var md oauth.ClientMetadata
	if err := json.Unmarshal(body, &md); err != nil {
		return nil, errors.New("the client metadata document is not a JSON object")
	}
	if md.ClientID != id {
		return nil, errors.New("the client metadata document's client_id is not its URL")
	}
	if md.ClientSecret != "" || md.ClientSecretExpiresAt != 0 {
		return nil, errors.New("a client metadata document must not carry a client secret")
	}
	switch md.TokenEndpointAuthMethod {
	case "", authNone:
	case "private_key_jwt":
		return nil, errors.New("private_key_jwt client authentication is not supported; use none")
	default:
		return nil, errors.New("a client metadata document's token_endpoint_auth_method must be none")
	}
	if len(md.RedirectURIs) == 0 {
		return nil, errors.New("the client metadata document has no redirect_uris")
	}
	if len(md.RedirectURIs) > maxRedirectURIs {
		return nil, errors.New("the client metadata document has too many redirect_uris")
	}
	for _, u := range md.RedirectURIs {
		if err := checkRedirectURI(u); err != nil {
			return nil, err
		}
	}
	if len(md.ResponseTypes) > 0 && (len(md.ResponseTypes) != 1 || md.ResponseTypes[0] != "code") {
		return nil, errors.New("the client metadata document's response_types must be [code]")
	}
	name := md.ClientName
	if hasControl(name) {
		name = ""
	}
	return &client{ID: id, Name: name, RedirectURIs: md.RedirectURIs, AuthMethod: authNone, Document: true}, nil
}

// checkMetadataURL applies the draft's rules to a URL client_id: https,
// a path, no fragment, user info or dot segments. http on a loopback host
// passes only when private addresses are allowed (test rigs).
func checkMetadataURL(id string, allowPrivate bool) error {
	u, err := url.Parse(id)
	if err != nil || u.Host == "" || u.Opaque != "" || !validHost(u.Hostname()) {
		return errors.New("the client_id URL is not valid")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowPrivate && netaddr.IsLoopbackHost(u.Hostname()):
	default:
		return errors.New("a URL client_id must be https")
	}
	if u.Path == "" || u.Path == "/" {
		return errors.New("a URL client_id must have a path")
	}
	if u.Fragment != "" || strings.Contains(id, "#") || u.User != nil {
		return errors.New("a URL client_id must not have a fragment or user info")
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return errors.New("a URL client_id must not have dot segments")
		}
	}
	return nil
}

// cacheLifetime reads how long a document may be cached: max-age, capped;
// nothing for no-store or no-cache; a default when the header is silent.
func cacheLifetime(cc string) time.Duration {
	age := metadataDefaultAge
	for _, d := range strings.Split(cc, ",") {
		d = strings.ToLower(strings.TrimSpace(d))
		name, val, _ := strings.Cut(d, "=")
		switch name {
		case "no-store", "no-cache":
			return 0
		case "max-age":
			n, err := strconv.Atoi(strings.Trim(val, `"`))
			if err != nil || n < 0 {
				return 0
			}
			age = time.Duration(min(n, int(metadataMaxAge/time.Second))) * time.Second
		}
	}
	return min(age, metadataMaxAge)
}
