package upstream

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/openapi"
)

// specTTL is how long a document fetched from a URL is reused by the
// sessions of its server; a file is reused until it changes.
const specTTL = 5 * time.Minute

// specCache keeps parsed OpenAPI documents, so that the sessions of a
// server (one per credential, or per call with session_mode per_call) do
// not read and parse the document each. Docs are immutable; safe for
// concurrent use.
var specCache = struct {
	mu sync.Mutex
	m  map[string]specEntry
}{m: map[string]specEntry{}}

type specEntry struct {
	doc     *openapi.Doc
	modTime time.Time // files: the version read
	size    int64
	fetched time.Time // URLs: when
}

// basePins holds, for each document file read without a base_url, the
// origin its servers URL named when first read; bounded by the config
// file's openapi servers (runtime servers take documents by URL only).
var basePins = struct {
	mu sync.Mutex
	m  map[string]string
}{m: map[string]string{}}

// pinBase refuses a base on another origin than the one the document file
// spec named when first read: a changed file cannot move the requests and
// their credential to another host while the gateway runs.
func pinBase(spec string, base *url.URL) error {
	o := openapi.Origin(base)
	basePins.mu.Lock()
	defer basePins.mu.Unlock()
	pinned, ok := basePins.m[spec]
	if !ok {
		basePins.m[spec] = o
		return nil
	}
	if pinned != o {
		return fmt.Errorf("openapi: the document's servers URL moved from %s to %s since it was first read; set base_url to send calls there", pinned, o)
	}
	return nil
}

// loadSpec is the parsed document of spec: from the cache when it is
// still current, else read (or fetched within timeout) and parsed.
func loadSpec(ctx context.Context, spec string, timeout time.Duration) (*openapi.Doc, error) {
	isURL := config.IsSpecURL(spec)
	var st os.FileInfo
	if !isURL {
		var err error
		if st, err = os.Stat(spec); err != nil {
			return openapi.Load(ctx, spec, openapi.LoadOptions{Timeout: timeout}) // names the cause
		}
	}
	specCache.mu.Lock()
	e, ok := specCache.m[spec]
	specCache.mu.Unlock()
	if ok && ((isURL && time.Since(e.fetched) < specTTL) || (!isURL && e.modTime.Equal(st.ModTime()) && e.size == st.Size())) {
		return e.doc, nil
	}
	doc, err := openapi.Load(ctx, spec, openapi.LoadOptions{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	e = specEntry{doc: doc, fetched: time.Now()}
	if st != nil {
		e.modTime, e.size = st.ModTime(), st.Size()
	}
	specCache.mu.Lock()
	if len(specCache.m) > 256 {
		clear(specCache.m) // bounded: a config has far fewer documents
	}
	specCache.m[spec] = e
	specCache.mu.Unlock()
	return doc, nil
}
