package openapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
)

// Defaults of LoadOptions.
const (
	DefaultMaxSpecBytes = 16 << 20
	DefaultFetchTimeout = 30 * time.Second
)

// ErrBlockedAddress refuses a spec URL that resolves to a non-public
// address (other than an explicit loopback host).
var ErrBlockedAddress = errors.New("openapi: spec URL resolves to a non-public address")

// LoadOptions bound the reading of a document; the zero value means the
// defaults.
type LoadOptions struct {
	MaxBytes int64         // 0: DefaultMaxSpecBytes
	Timeout  time.Duration // 0: DefaultFetchTimeout
	// HTTPClient fetches a spec URL; nil: a client that dials public
	// addresses only (loopback when the URL names a loopback host),
	// follows no redirect to another origin and uses no proxy.
	HTTPClient *http.Client
}

// Load reads spec (a file path or an http(s) URL) and parses it.
func Load(ctx context.Context, spec string, opts LoadOptions) (*Doc, error) {
	max := opts.MaxBytes
	if max <= 0 {
		max = DefaultMaxSpecBytes
	}
	var (
		data []byte
		loc  *url.URL
		err  error
	)
	if config.IsSpecURL(spec) {
		loc, err = url.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("openapi: spec URL: %w", err)
		}
		data, err = fetch(ctx, loc, opts, max)
	} else {
		data, err = readFile(spec, max)
	}
	if err != nil {
		return nil, err
	}
	return Parse(data, loc)
}

func readFile(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("openapi: read spec: %w", err)
	}
	defer f.Close()
	return readBounded(f, max)
}

func readBounded(r io.Reader, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("openapi: read spec: %w", err)
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("openapi: spec larger than %d bytes", max)
	}
	return data, nil
}

func fetch(ctx context.Context, u *url.URL, opts LoadOptions, max int64) ([]byte, error) {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := opts.HTTPClient
	if client == nil {
		client = specClient(u, timeout)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("openapi: spec request: %w", err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the message would repeat the URL, query included
		}
		return nil, fmt.Errorf("openapi: fetch spec from %s: %w", u.Redacted(), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("openapi: fetch spec from %s: HTTP %d", u.Redacted(), resp.StatusCode)
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("openapi: spec larger than %d bytes", max)
	}
	return readBounded(resp.Body, max)
}

// Dial is how the document at u is fetched, and how the requests of a
// server whose base URL the document chose (Doc.Base: u's origin) are
// dialled: public addresses only, judged at connect time (a name that
// resolves to a private address, or is rebound to one, is refused),
// unless u names a loopback host (the operator's own machine, written as
// such). Use it without a proxy: through one, the dialled address would
// be the proxy's.
func Dial(u *url.URL, timeout time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	if loopbackHost(u.Hostname()) {
		return (&net.Dialer{Timeout: timeout}).DialContext
	}
	return oauth.DialPublic(timeout, ErrBlockedAddress)
}

// specClient dials as Dial does, and follows redirects within u's origin
// only.
func specClient(u *url.URL, timeout time.Duration) *http.Client {
	dial := Dial(u, timeout)
	return &http.Client{
		Transport: &http.Transport{DialContext: dial, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			if !strings.EqualFold(req.URL.Scheme, u.Scheme) || !strings.EqualFold(req.URL.Host, u.Host) {
				return errors.New("refused redirect to another origin")
			}
			return nil
		},
	}
}

func loopbackHost(h string) bool { return netaddr.IsLoopbackHost(h) }

// Parse parses an OpenAPI 3.0 or 3.1 document (JSON or YAML) and resolves
// its internal $refs; loc, when not nil, is where it was fetched from (a
// relative servers URL is resolved against it). External $refs are
// refused.
func Parse(data []byte, loc *url.URL) (*Doc, error) {
	loader := openapi3.NewLoader()
	loader.IsExternalRefsAllowed = false
	t, err := loader.LoadFromData(resolveIDRefs(data))
	if err != nil {
		return nil, fmt.Errorf("openapi: parse spec: %w", err)
	}
	if !strings.HasPrefix(t.OpenAPI, "3.") {
		return nil, fmt.Errorf("openapi: unsupported version %q (want 3.0 or 3.1)", t.OpenAPI)
	}
	return newDoc(t, loc), nil
}
