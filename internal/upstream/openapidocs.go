package upstream

import (
	"context"
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
