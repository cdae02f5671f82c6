package fleet

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HeaderReplica names, on every response through the balancer, the
// replica that served it.
const HeaderReplica = "X-Fleet-Replica"

// Balancer is the test load balancer: a Go reverse proxy that sends each
// request to the next replica in turn (round robin over the replicas it
// believes up), so that consecutive requests of one session land on
// different replicas. It passes every header, reads each request body in
// full before sending it on, flushes each write of a reply at once
// (FlushInterval -1: SSE streams stay live) and names the replica that
// served in HeaderReplica.
//
// A replica is taken out of rotation when a request to it fails in
// transport (passive check) or its /readyz stops answering 200 (active
// check, every healthEvery), and put back when /readyz answers again: what
// a real load balancer does. The request that failed is answered 502 and
// not retried on another replica: a POST may have reached the dead
// replica's upstream, so retrying is the client's decision, not the
// balancer's.
type Balancer struct {
	URL      string
	backends []*backend
	next     atomic.Uint64
	proxy    *httputil.ReverseProxy

	mu    sync.Mutex
	route func(*http.Request) int // see Route
	// errs is what the proxy logged: failures it could not answer 502
	// (a reply cut off mid-body), for a test's failure message.
	errs strings.Builder
}

// Write takes the proxy's log lines.
func (b *Balancer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.errs.Len() < 64<<10 {
		b.errs.Write(p)
	}
	return len(p), nil
}

// Errors is what the proxy logged so far.
func (b *Balancer) Errors() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errs.String()
}

type backend struct {
	r      *Replica
	target *url.URL
	down   atomic.Bool
	// failedAt is when a request to it last failed in transport (unix
	// nanoseconds): a health probe that started earlier must not put it
	// back in rotation.
	failedAt atomic.Int64
	served   atomic.Int64 // responses relayed
	failed   atomic.Int64 // requests answered 502
	// lastErr is why the last of them failed.
	lastErr atomic.Pointer[string]
}

// HeaderPin on a request names the replica it must go to, when the
// balancer routes with pinByHeader.
const HeaderPin = "X-Fleet-Pin"

// pinByHeader is a Route policy: a request with HeaderPin goes to the
// replica it names, the others round robin.
func (b *Balancer) pinByHeader(r *http.Request) int {
	name := r.Header.Get(HeaderPin)
	for i, be := range b.backends {
		if be.r.Name == name {
			return i
		}
	}
	return -1
}

// healthEvery is the active health check's period.
const healthEvery = 100 * time.Millisecond

type backendKey struct{}

func newBalancer(t testing.TB, replicas []*Replica) *Balancer {
	t.Helper()
	b := &Balancer{}
	for _, r := range replicas {
		u, _ := url.Parse(r.URL)
		b.backends = append(b.backends, &backend{r: r, target: u})
	}
	b.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			be := pr.In.Context().Value(backendKey{}).(*backend)
			pr.SetURL(be.target)
		},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			be := resp.Request.Context().Value(backendKey{}).(*backend)
			be.served.Add(1)
			resp.Header.Set(HeaderReplica, be.r.Name)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			be := r.Context().Value(backendKey{}).(*backend)
			be.failed.Add(1)
			msg := err.Error()
			be.lastErr.Store(&msg)
			if r.Context().Err() == nil {
				be.failedAt.Store(time.Now().UnixNano())
				be.down.Store(true)
			}
			w.Header().Set(HeaderReplica, be.r.Name)
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "balancer: "+msg)
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		ErrorLog:  log.New(b, "balancer: ", 0),
	}
	srv := httptest.NewServer(b)
	b.URL = srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go b.healthCheck(ctx, done)
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	return b
}

// Route replaces round robin: pick returns the index of the replica for a
// request, or -1 for round robin. For scenarios that must put a request on
// a given replica (an elicitation answered on B, a retry on C, a revoke on
// A). nil restores plain round robin.
func (b *Balancer) Route(pick func(*http.Request) int) {
	b.mu.Lock()
	b.route = pick
	b.mu.Unlock()
}

func (b *Balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	be := b.pick(r)
	if be == nil {
		http.Error(w, "no replica up", http.StatusServiceUnavailable)
		return
	}
	// The request body is read in full before it is sent on, as nginx
	// does by default (proxy_request_buffering): streamed, a replica that
	// answers before reading it (a 429) races the proxy's copy of it, and
	// Go's transport then drops the connection under the reply.
	if r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
		if err != nil {
			http.Error(w, "balancer: read request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	b.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), backendKey{}, be)))
}

func (b *Balancer) pick(r *http.Request) *backend {
	b.mu.Lock()
	route := b.route
	b.mu.Unlock()
	if route != nil {
		if i := route(r); i >= 0 {
			return b.backends[i]
		}
	}
	for range len(b.backends) {
		be := b.backends[int(b.next.Add(1)-1)%len(b.backends)]
		if !be.down.Load() {
			return be
		}
	}
	return nil
}

// healthCheck polls every backend's /readyz until ctx ends.
func (b *Balancer) healthCheck(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, be := range b.backends {
			probed := time.Now().UnixNano()
			code, _ := be.r.Ready()
			if code != http.StatusOK {
				be.down.Store(true)
			} else if probed > be.failedAt.Load() {
				be.down.Store(false)
			}
		}
	}
}

// Counts reports, per replica name, the responses relayed and the requests
// answered 502 since the last ResetCounts.
func (b *Balancer) Counts() (served, failed map[string]int64) {
	served, failed = map[string]int64{}, map[string]int64{}
	for _, be := range b.backends {
		served[be.r.Name] = be.served.Load()
		failed[be.r.Name] = be.failed.Load()
	}
	return served, failed
}

// LastError is why the last request to replica name failed in transport
// ("" for none).
func (b *Balancer) LastError(name string) string {
	for _, be := range b.backends {
		if e := be.lastErr.Load(); be.r.Name == name && e != nil {
			return *e
		}
	}
	return ""
}

// ResetCounts zeroes the counters.
func (b *Balancer) ResetCounts() {
	for _, be := range b.backends {
		be.served.Store(0)
		be.failed.Store(0)
		be.lastErr.Store(nil)
	}
}

// WaitUp waits until the balancer has every replica back in rotation.
func (b *Balancer) WaitUp(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		up := 0
		for _, be := range b.backends {
			if !be.down.Load() {
				up++
			}
		}
		if up == len(b.backends) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("balancer: %d of %d replicas up after 10s", up, len(b.backends))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
