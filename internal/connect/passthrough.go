package connect

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/oauth/client"
)

// A single-server passthrough route (S9.2) mirrors its upstream's own
// RFC 9728 document: the upstream's authorization servers and scopes,
// the gateway's resource. The gateway decides which routes these are;
// the documents are fetched and cached here.

// Bounds of the mirrored upstream metadata.
const (
	prmCacheTTL     = 5 * time.Minute
	prmNegativeTTL  = 30 * time.Second
	prmCacheEntries = 256
)

// prmEntry is one upstream's metadata, fetched at at: md nil when it has
// none; err when the fetch failed.
type prmEntry struct {
	at  time.Time
	md  *oauth.ProtectedResourceMetadata
	err error
}

// prmCache holds upstream metadata documents by server URL.
type prmCache struct {
	// mu guards the fields below.
	mu sync.Mutex
	m  map[string]prmEntry
}

// ServeResourceMetadata answers with the protected resource metadata of
// the single-server passthrough route of server whose resource
// identifier is resource.
func (f *Flows) ServeResourceMetadata(w http.ResponseWriter, r *http.Request, server, resource string) {
	srv := f.conf().Servers[server]
	up, err := f.upstreamPRM(r.Context(), srv.URL)
	switch {
	case err != nil:
		f.log.Warn("could not fetch a passthrough upstream's protected resource metadata", "server", server, "error", err)
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": "Bad Gateway", "details": "the protected resource metadata of upstream " + server + " could not be fetched"})
		return
	case up == nil:
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "Not Found", "details": "upstream " + server + " publishes no protected resource metadata"})
		return
	}
	md := oauth.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   up.AuthorizationServers,
		ScopesSupported:        up.ScopesSupported,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "mcpgate: " + server,
	}
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeJSON(w, http.StatusOK, md)
}

// upstreamPRM is the upstream's own protected resource metadata, cached
// for prmCacheTTL (a failure or its absence for prmNegativeTTL).
func (f *Flows) upstreamPRM(ctx context.Context, serverURL string) (*oauth.ProtectedResourceMetadata, error) {
	c := &f.prms
	now := f.now()
	c.mu.Lock()
	if e, ok := c.m[serverURL]; ok {
		ttl := prmCacheTTL
		if e.md == nil {
			ttl = prmNegativeTTL
		}
		if now.Sub(e.at) < ttl {
			c.mu.Unlock()
			return e.md, e.err
		}
	}
	c.mu.Unlock()
	// The upstream is the operator's: its own origin may be private. The
	// fetch is bounded (1 MiB, 10 s, same-origin redirects only) and
	// finishes for the cache even when this client goes away.
	md, err := client.FetchResourceMetadata(context.WithoutCancel(ctx), serverURL, f.httpClient, true)
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= prmCacheEntries {
		c.m = map[string]prmEntry{}
	}
	c.m[serverURL] = prmEntry{at: now, md: md, err: err}
	c.mu.Unlock()
	return md, err
}
