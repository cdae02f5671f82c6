package callers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
)

const master = "mcpg_master-0123456789abcdefghijklmnopqrstuvwxyz"

func TestMasterKey(t *testing.T) {
	s := openStore(t)
	a := newAuth(t, Options{Keys: s, MasterKey: master})

	for _, r := range []*http.Request{
		request(remote, HeaderAPIKey, master),
		request(remote, "Authorization", "Bearer "+master),
	} {
		c := mustAuth(t, a, r)
		if !c.Master || !c.Admin || c.Anonymous || c.Servers != nil {
			t.Errorf("master caller = %+v; want Master, Admin, all servers", c)
		}
	}

	wrong := []string{
		master[:len(master)-1] + "X",             // last byte
		"X" + master[1:],                         // first byte
		master[:20] + "?" + master[21:],          // a middle byte
		master[:len(master)-1],                   // one byte short
		master + "x",                             // one byte long
		strings.ToUpper(master[:5]) + master[5:], // case
	}
	for _, k := range wrong {
		if w := mustFail(t, a, request(remote, HeaderAPIKey, k)); w.Code != http.StatusUnauthorized {
			t.Errorf("master key with one byte changed: status %d, want 401", w.Code)
		}
	}
}

func TestNoMasterKeyConfigured(t *testing.T) {
	a := newAuth(t, Options{Keys: openStore(t)})
	// An empty master key must not make an empty or any other key master.
	for _, k := range []string{"", " ", "Bearer", master} {
		c, f := a.Authenticate(request(remote, HeaderAPIKey, k))
		if c != nil || f == nil || f.Status != http.StatusUnauthorized {
			t.Errorf("key %q without a master key: %+v, %+v; want 401", k, c, f)
		}
	}
}

func TestHeaderPrecedence(t *testing.T) {
	s := openStore(t)
	key := addKey(t, s, store.Key{Alias: "alice"})
	other := addKey(t, s, store.Key{Alias: "bob"})
	configKey := addKey(t, s, store.Key{Alias: "legacy", Source: store.SourceConfig}, "sk-legacy-config-key-0001")
	a := newAuth(t, Options{Keys: s, MasterKey: master, Anonymous: true})

	tests := []struct {
		name     string
		headers  []string
		alias    string // "" with anonymous = anonymous caller
		master   bool
		fromAuth bool
		status   int // a failure
	}{
		{name: "gateway header", headers: []string{"x-mcpgate-api-key", key}, alias: "alice"},
		{name: "gateway header with Bearer prefix", headers: []string{HeaderAPIKey, "Bearer " + key}, alias: "alice"},
		{name: "gateway header wins, Authorization is the upstream token",
			headers: []string{HeaderAPIKey, key, "Authorization", "Bearer upstream-token"}, alias: "alice"},
		{name: "gateway header wins over another gateway key in Authorization",
			headers: []string{HeaderAPIKey, key, "Authorization", "Bearer " + other}, alias: "alice"},
		{name: "a wrong gateway header does not fall back to Authorization",
			headers: []string{HeaderAPIKey, "mcpg_wrong", "Authorization", "Bearer " + key}, status: 401},
		{name: "blank gateway header is absent",
			headers: []string{HeaderAPIKey, "  ", "Authorization", "Bearer " + key}, alias: "alice", fromAuth: true},
		{name: "bearer with the prefix", headers: []string{"Authorization", "Bearer " + key}, alias: "alice", fromAuth: true},
		{name: "bearer scheme is case-insensitive", headers: []string{"Authorization", "bEaReR  " + key + " "}, alias: "alice", fromAuth: true},
		{name: "bearer that is a stored key without the prefix",
			headers: []string{"Authorization", "Bearer " + configKey}, alias: "legacy", fromAuth: true},
		{name: "bearer that is the master key", headers: []string{"Authorization", "Bearer " + master}, master: true, fromAuth: true},
		{name: "bearer that is no gateway key is the upstream token",
			headers: []string{"Authorization", "Bearer eyJhbGciOi.upstream.jwt"}},
		{name: "a long bearer is an upstream token",
			headers: []string{"Authorization", "Bearer " + strings.Repeat("j", maxKeyLen+1)}},
		{name: "basic auth is not a gateway key", headers: []string{"Authorization", "Basic " + key}},
		{name: "a wrong bearer with the prefix fails",
			headers: []string{"Authorization", "Bearer mcpg_not-a-key"}, status: 401},
		{name: "a long gateway header fails",
			headers: []string{HeaderAPIKey, "mcpg_" + strings.Repeat("k", maxKeyLen)}, status: 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request(remote, tt.headers...)
			before := r.Header.Clone()
			c, f := a.Authenticate(r)
			if !reflect.DeepEqual(r.Header, before) {
				t.Errorf("Authenticate changed the request headers: %v, was %v", r.Header, before)
			}
			if tt.status != 0 {
				if f == nil || f.Status != tt.status {
					t.Fatalf("Authenticate = %+v, %+v; want status %d", c, f, tt.status)
				}
				return
			}
			if f != nil {
				t.Fatalf("Authenticate: %d %s", f.Status, f.Body)
			}
			anonymous := tt.alias == "" && !tt.master
			if c.Alias != tt.alias || c.Master != tt.master || c.KeyFromAuthorization != tt.fromAuth || c.Anonymous != anonymous {
				t.Errorf("caller = {Alias:%q Master:%v KeyFromAuthorization:%v Anonymous:%v}; want {%q %v %v %v}",
					c.Alias, c.Master, c.KeyFromAuthorization, c.Anonymous, tt.alias, tt.master, tt.fromAuth, anonymous)
			}

			// What the gateway forwards: never the gateway key, always the
			// caller's own upstream token.
			h := r.Header.Clone()
			StripCredentials(h, c)
			if h.Get(HeaderAPIKey) != "" {
				t.Errorf("after StripCredentials %s = %q", HeaderAPIKey, h.Get(HeaderAPIKey))
			}
			gotAuth, wantAuth := h.Get("Authorization"), r.Header.Get("Authorization")
			if tt.fromAuth {
				wantAuth = ""
			}
			if gotAuth != wantAuth {
				t.Errorf("after StripCredentials Authorization = %q, want %q", gotAuth, wantAuth)
			}
		})
	}
}

func TestMissingKey(t *testing.T) {
	s := openStore(t)
	t.Run("closed gateway", func(t *testing.T) {
		a := newAuth(t, Options{Keys: s})
		w := mustFail(t, a, request(remote))
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", w.Code)
		}
		if got, want := w.Body.String(), `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Unauthorized: a valid mcpgate API key is required"}}`; got != want {
			t.Errorf("body\n got %s\nwant %s", got, want)
		}
		if got, want := w.Header().Get("WWW-Authenticate"), `Bearer realm="mcpgate"`; got != want {
			t.Errorf("WWW-Authenticate = %q, want %q", got, want)
		}
		if got := w.Header().Get("Content-Type"); got != "application/json" {
			t.Errorf("Content-Type = %q", got)
		}
		// An upstream token alone does not get in.
		if w := mustFail(t, a, request(remote, "Authorization", "Bearer upstream")); w.Code != http.StatusUnauthorized {
			t.Errorf("upstream bearer on a closed gateway: status %d, want 401", w.Code)
		}
	})
	t.Run("anonymous gateway", func(t *testing.T) {
		a := newAuth(t, Options{Keys: s, Anonymous: true})
		c := mustAuth(t, a, request(remote))
		if !c.Anonymous || c.Alias != "" || c.Admin || c.Master || c.KeyFromAuthorization {
			t.Errorf("caller = %+v; want anonymous", c)
		}
		if !strings.HasPrefix(c.Owner, OwnerIP) {
			t.Errorf("owner %q; want an ip: fingerprint", c.Owner)
		}
		c = mustAuth(t, a, request(remote, "Authorization", "Bearer upstream"))
		if !c.Anonymous || !strings.HasPrefix(c.Owner, OwnerOAuth) {
			t.Errorf("caller with an upstream bearer = %+v; want anonymous with an oauth: owner", c)
		}
		// A presented key must be valid even here.
		if w := mustFail(t, a, request(remote, HeaderAPIKey, "mcpg_wrong")); w.Code != http.StatusUnauthorized {
			t.Errorf("wrong key on an anonymous gateway: status %d, want 401", w.Code)
		}
	})
}

// TestRejectedKeysAreIndistinguishable: whatever is wrong with a key, the
// response is the same bytes, so it tells nothing about which keys exist.
func TestRejectedKeysAreIndistinguishable(t *testing.T) {
	s := openStore(t)
	clock := newFakeClock()
	disabled := addKey(t, s, store.Key{Alias: "disabled", Disabled: true})
	expired := addKey(t, s, store.Key{Alias: "expired", ExpiresAt: clock.Now().Add(-time.Hour)})
	expiresNow := addKey(t, s, store.Key{Alias: "expires-now", ExpiresAt: clock.Now()})
	valid := addKey(t, s, store.Key{Alias: "valid", ExpiresAt: clock.Now().Add(time.Hour)})
	unknown, _ := NewSecret()
	a := newAuth(t, Options{Keys: s, MasterKey: master, Now: clock.Now})

	mustAuth(t, a, request(remote, HeaderAPIKey, valid))

	reference := mustFail(t, a, request(remote, HeaderAPIKey, unknown))
	if reference.Code != http.StatusUnauthorized {
		t.Fatalf("unknown key: status %d, want 401", reference.Code)
	}
	for name, r := range map[string]*http.Request{
		"unknown in Authorization":  request(remote, "Authorization", "Bearer "+unknown),
		"disabled":                  request(remote, HeaderAPIKey, disabled),
		"disabled in Authorization": request(remote, "Authorization", "Bearer "+disabled),
		"expired":                   request(remote, HeaderAPIKey, expired),
		"expires now":               request(remote, HeaderAPIKey, expiresNow),
		"malformed":                 request(remote, HeaderAPIKey, "not a key at all"),
		"too long":                  request(remote, HeaderAPIKey, strings.Repeat("x", 4096)),
		"missing":                   request(remote),
		"master with a wrong byte":  request(remote, HeaderAPIKey, master[:10]+"#"+master[11:]),
	} {
		w := mustFail(t, a, r)
		if w.Code != reference.Code {
			t.Errorf("%s: status %d, unknown key got %d", name, w.Code, reference.Code)
		}
		if !reflect.DeepEqual(w.Header(), reference.Header()) {
			t.Errorf("%s: headers %v, unknown key got %v", name, w.Header(), reference.Header())
		}
		if w.Body.String() != reference.Body.String() {
			t.Errorf("%s: body %s, unknown key got %s", name, w.Body, reference.Body)
		}
	}
}

func TestCacheCoalescesLookups(t *testing.T) {
	s := openStore(t)
	valid := addKey(t, s, store.Key{Alias: "valid"})
	wrong, _ := NewSecret()
	for _, tt := range []struct {
		name string
		key  string
		want int // status, 0 = accepted
	}{
		{"wrong key", wrong, http.StatusUnauthorized},
		{"valid key", valid, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spy := &spyKeys{next: s}
			clock := newFakeClock()
			a := newAuth(t, Options{Keys: spy, Now: clock.Now})

			// 1000 requests, 50 at a time: concurrent misses wait for the
			// one lookup in flight instead of starting their own.
			var wg sync.WaitGroup
			errs := make(chan string, 1000)
			for g := 0; g < 50; g++ {
				wg.Go(func() {
					for i := 0; i < 20; i++ {
						c, f := a.Authenticate(request(remote, HeaderAPIKey, tt.key))
						switch {
						case tt.want == 0 && f != nil:
							errs <- fmt.Sprintf("status %d", f.Status)
						case tt.want != 0 && (c != nil || f.Status != tt.want):
							errs <- fmt.Sprintf("got %+v %+v, want status %d", c, f, tt.want)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Fatal(e)
			}
			if got := spy.gets.Load(); got != 1 {
				t.Errorf("store lookups for 1000 requests = %d, want 1", got)
			}

			clock.Advance(DefaultCacheTTL - time.Millisecond)
			a.Authenticate(request(remote, HeaderAPIKey, tt.key))
			if got := spy.gets.Load(); got != 1 {
				t.Errorf("store lookups just before the TTL = %d, want 1", got)
			}
			clock.Advance(time.Millisecond)
			a.Authenticate(request(remote, HeaderAPIKey, tt.key))
			if got := spy.gets.Load(); got != 2 {
				t.Errorf("store lookups after the TTL = %d, want 2", got)
			}
		})
	}
}

// TestConcurrentMissesShareOneLookup: requests that arrive while the
// lookup of their key is in flight wait for it instead of starting their
// own, so a burst of one wrong key costs one store read even when cold.
//
// The test runs in a synctest bubble: synctest.Wait returns once every
// follower is blocked, that is, waiting on the lookup in flight (a pause
// could end before a slow follower got there, and then the cached miss
// would hide whether it would have shared the lookup).
func TestConcurrentMissesShareOneLookup(t *testing.T) {
	synctest.Test(t, testConcurrentMissesShareOneLookup)
}

func testConcurrentMissesShareOneLookup(t *testing.T) {
	s := openStore(t)
	entered, release := make(chan struct{}), make(chan struct{})
	spy := &spyKeys{next: s}
	spy.getByHash = func(ctx context.Context, hash string) (store.Key, error) {
		if spy.gets.Load() == 1 {
			close(entered)
			<-release
		}
		return s.GetKeyByHash(ctx, hash)
	}
	a := newAuth(t, Options{Keys: spy})

	var wg sync.WaitGroup
	statuses := make(chan int, 21)
	try := func() {
		_, f := a.Authenticate(request(remote, HeaderAPIKey, "mcpg_wrong"))
		statuses <- f.Status
	}
	wg.Go(try)
	<-entered
	for range 20 {
		wg.Go(try)
	}
	synctest.Wait() // every follower waits on the lookup in flight
	close(release)
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", st)
		}
	}
	if got := spy.gets.Load(); got != 1 {
		t.Errorf("store lookups = %d, want 1", got)
	}
}

func TestCacheIsBounded(t *testing.T) {
	s := openStore(t)
	valid := addKey(t, s, store.Key{Alias: "valid"})
	spy := &spyKeys{next: s}
	a := newAuth(t, Options{Keys: spy, CacheSize: 10})

	mustAuth(t, a, request(remote, HeaderAPIKey, valid))
	for i := range 100 {
		mustFail(t, a, request(remote, HeaderAPIKey, fmt.Sprintf("mcpg_wrong-%d", i)))
	}
	a.cache.mu.Lock()
	hits, misses := len(a.cache.hits), len(a.cache.misses)
	a.cache.mu.Unlock()
	if hits != 1 || misses != 10 {
		t.Errorf("cache holds %d hits and %d misses; want 1 and 10", hits, misses)
	}
	// The flood of wrong keys did not push the valid key out.
	gets := spy.gets.Load()
	mustAuth(t, a, request(remote, HeaderAPIKey, valid))
	if got := spy.gets.Load(); got != gets {
		t.Errorf("valid key looked up again after a flood of wrong keys")
	}
}

func TestCacheDisabled(t *testing.T) {
	s := openStore(t)
	valid := addKey(t, s, store.Key{Alias: "valid"})
	spy := &spyKeys{next: s}
	a := newAuth(t, Options{Keys: spy, CacheTTL: -1})
	for range 3 {
		mustAuth(t, a, request(remote, HeaderAPIKey, valid))
	}
	if got := spy.gets.Load(); got != 3 {
		t.Errorf("lookups with caching off = %d, want 3", got)
	}
}

// TestInvalidate: a key revoked in the store keeps working from the cache
// until the admin API invalidates it, then fails at once.
func TestInvalidate(t *testing.T) {
	ctx := context.Background()
	revocations := []struct {
		name   string
		revoke func(t *testing.T, s store.Keys, alias string)
	}{
		{"delete", func(t *testing.T, s store.Keys, alias string) {
			if err := s.DeleteKey(ctx, alias); err != nil {
				t.Fatal(err)
			}
		}},
		{"disable", func(t *testing.T, s store.Keys, alias string) {
			k, err := s.GetKeyByAlias(ctx, alias)
			if err != nil {
				t.Fatal(err)
			}
			k.Disabled = true
			if _, err := s.UpdateKey(ctx, k); err != nil {
				t.Fatal(err)
			}
		}},
	}
	forget := []struct {
		name string
		do   func(a *Authenticator, alias, secret string)
	}{
		{"by alias", func(a *Authenticator, alias, _ string) { a.Invalidate(alias) }},
		{"by hash", func(a *Authenticator, _, secret string) { a.Invalidate(store.HashKey(secret)) }},
		{"flush", func(a *Authenticator, _, _ string) { a.Flush() }},
	}
	for _, rv := range revocations {
		for _, fg := range forget {
			t.Run(rv.name+" "+fg.name, func(t *testing.T) {
				s := openStore(t)
				secret := addKey(t, s, store.Key{Alias: "revoked"})
				a := newAuth(t, Options{Keys: s, CacheTTL: time.Hour})
				mustAuth(t, a, request(remote, HeaderAPIKey, secret))

				c := mustAuth(t, a, request(remote, HeaderAPIKey, secret))
				if !a.StillValid(ctx, c) {
					t.Error("StillValid before the revocation = false")
				}

				rv.revoke(t, s, "revoked")
				mustAuth(t, a, request(remote, HeaderAPIKey, secret)) // still cached

				fg.do(a, "revoked", secret)
				if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusUnauthorized {
					t.Errorf("revoked key after invalidation: status %d, want 401", w.Code)
				}
				// A stream opened with the key hears of it too.
				if a.StillValid(ctx, c) {
					t.Error("StillValid after the revocation = true")
				}
			})
		}
	}
}

// TestSetFresh: while the replica may have missed announcements (fresh
// reports true), a key revoked in the store with nobody invalidating it
// here is refused at the next request, not after CacheTTL; a stream's
// re-check too. Otherwise the cache answers as before.
func TestSetFresh(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "revoked"})
	spy := &spyKeys{next: s}
	a := newAuth(t, Options{Keys: spy, CacheTTL: time.Hour})
	var fresh atomic.Bool
	a.SetFresh(fresh.Load)
	c := mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	if got := spy.gets.Load(); got != 1 {
		t.Fatalf("store lookups with the bus heard = %d, want 1 (cached)", got)
	}
	fresh.Store(true)
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	if got := spy.gets.Load(); got != 2 {
		t.Errorf("store lookups once fresh = %d, want 2 (read again)", got)
	}
	if err := s.DeleteKey(ctx, "revoked"); err != nil {
		t.Fatal(err)
	}
	if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusUnauthorized {
		t.Errorf("key revoked elsewhere, fresh: status %d, want 401", w.Code)
	}
	if a.StillValid(ctx, c) {
		t.Error("StillValid of the revoked key, fresh = true")
	}
}

// TestInvalidateDuringLookup: a lookup that read the store before a
// revocation must not put the old answer back in the cache.
func TestInvalidateDuringLookup(t *testing.T) {
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "racy"})
	entered, release := make(chan struct{}), make(chan struct{})
	spy := &spyKeys{next: s}
	spy.getByHash = func(ctx context.Context, hash string) (store.Key, error) {
		k, err := s.GetKeyByHash(ctx, hash)
		if spy.gets.Load() == 1 {
			close(entered)
			<-release
		}
		return k, err
	}
	a := newAuth(t, Options{Keys: spy, CacheTTL: time.Hour})

	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Authenticate(request(remote, HeaderAPIKey, secret))
	}()
	<-entered
	if err := s.DeleteKey(context.Background(), "racy"); err != nil {
		t.Fatal(err)
	}
	a.Invalidate("racy")
	close(release)
	<-done

	if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusUnauthorized {
		t.Errorf("key deleted during its lookup: status %d, want 401", w.Code)
	}
}

func TestStoreError(t *testing.T) {
	spy := &spyKeys{getByHash: func(context.Context, string) (store.Key, error) {
		return store.Key{}, errors.New("disk on fire")
	}}
	a := newAuth(t, Options{Keys: spy, Anonymous: true})
	for range 2 {
		w := mustFail(t, a, request(remote, HeaderAPIKey, "mcpg_whatever"))
		if w.Code != http.StatusServiceUnavailable || strings.Contains(w.Body.String(), "fire") {
			t.Errorf("store error: %d %s; want 503 without the cause", w.Code, w.Body)
		}
	}
	if got := spy.gets.Load(); got != 2 {
		t.Errorf("lookups = %d, want 2 (errors are not cached)", got)
	}
	// A bearer that may be a stored key cannot be classified: fail closed
	// rather than forward what may be a gateway key upstream.
	if w := mustFail(t, a, request(remote, "Authorization", "Bearer sk-maybe")); w.Code != http.StatusServiceUnavailable {
		t.Errorf("unclassifiable bearer: status %d, want 503", w.Code)
	}
}

func TestNilKeys(t *testing.T) {
	a := newAuth(t, Options{MasterKey: master})
	mustAuth(t, a, request(remote, HeaderAPIKey, master))
	if w := mustFail(t, a, request(remote, HeaderAPIKey, "mcpg_other")); w.Code != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", w.Code)
	}
}

func TestAllowedCIDRs(t *testing.T) {
	s := openStore(t)
	limited := addKey(t, s, store.Key{Alias: "limited", AllowedCIDRs: []string{"10.0.0.0/8", "2001:db8::/32", "192.0.2.7", "not-a-cidr"}})
	open := addKey(t, s, store.Key{Alias: "open"})
	v6only := addKey(t, s, store.Key{Alias: "v6only", AllowedCIDRs: []string{"::1/128"}})
	a := newAuth(t, Options{Keys: s})

	tests := []struct {
		key, remote string
		ok          bool
	}{
		{limited, "10.1.2.3:4000", true},
		{limited, "10.255.255.255:1", true},
		{limited, "11.0.0.1:4000", false},
		{limited, "192.0.2.7:80", true},
		{limited, "192.0.2.8:80", false},
		{limited, "[::ffff:10.1.2.3]:4000", true}, // IPv4-mapped IPv6 is IPv4
		{limited, "[2001:db8::1]:443", true},
		{limited, "[2001:db8:ffff::1%eth0]:443", true}, // the zone is not part of the address
		{limited, "[2001:db9::1]:443", false},
		{limited, "[::1]:443", false},
		{limited, "", false},
		{limited, "@", false},
		{open, "203.0.113.1:1", true},
		{open, "[2001:db9::1]:443", true},
		{v6only, "[::1]:8080", true},
		{v6only, "127.0.0.1:8080", false},
	}
	for _, tt := range tests {
		c, f := a.Authenticate(request(tt.remote, HeaderAPIKey, tt.key))
		if tt.ok {
			if f != nil {
				t.Errorf("from %q: %d %s; want allowed", tt.remote, f.Status, f.Body)
			}
			continue
		}
		if c != nil || f == nil || f.Status != http.StatusForbidden {
			t.Errorf("from %q: %+v %+v; want 403", tt.remote, c, f)
			continue
		}
		if got, want := string(f.Body), `{"jsonrpc":"2.0","id":null,"error":{"code":-32003,"message":"API key is not allowed from this address."}}`; got != want {
			t.Errorf("403 body %s, want %s", got, want)
		}
	}

	// X-Forwarded-For is not trusted.
	r := request("11.0.0.1:4000", HeaderAPIKey, limited, "X-Forwarded-For", "10.1.2.3", "X-Real-Ip", "10.1.2.3", "Forwarded", "for=10.1.2.3")
	if _, f := a.Authenticate(r); f == nil || f.Status != http.StatusForbidden {
		t.Errorf("X-Forwarded-For from a denied address: %+v; want 403", f)
	}
}

func TestRateLimit(t *testing.T) {
	s := openStore(t)
	limited := addKey(t, s, store.Key{Alias: "limited", RateLimitRPM: 60})
	neighbour := addKey(t, s, store.Key{Alias: "neighbour", RateLimitRPM: 60})
	slow := addKey(t, s, store.Key{Alias: "slow", RateLimitRPM: 1})
	unlimited := addKey(t, s, store.Key{Alias: "unlimited"})
	clock := newFakeClock()
	a := newAuth(t, Options{Keys: s, MasterKey: master, Now: clock.Now})

	for i := range 60 {
		if _, f := a.Authenticate(request(remote, HeaderAPIKey, limited)); f != nil {
			t.Fatalf("request %d of 60: %d", i+1, f.Status)
		}
	}
	clock.Advance(999 * time.Millisecond) // still within the second
	w := mustFail(t, a, request(remote, HeaderAPIKey, limited))
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("61st request: status %d, want 429", w.Code)
	}
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After = %q, want >= 1", w.Header().Get("Retry-After"))
	}
	if got, want := w.Body.String(), `{"jsonrpc":"2.0","id":null,"error":{"code":-32029,"message":"Too Many Requests: rate limit exceeded for this API key"}}`; got != want {
		t.Errorf("429 body %s, want %s", got, want)
	}

	// Other keys have their own buckets; unlimited keys and the master key
	// have none.
	for range 60 {
		mustAuth(t, a, request(remote, HeaderAPIKey, neighbour))
	}
	for range 500 {
		mustAuth(t, a, request(remote, HeaderAPIKey, unlimited))
		mustAuth(t, a, request(remote, HeaderAPIKey, master))
	}

	// One second after the burst one token is back: one more request.
	clock.Advance(time.Millisecond)
	mustAuth(t, a, request(remote, HeaderAPIKey, limited))
	if w := mustFail(t, a, request(remote, HeaderAPIKey, limited)); w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Errorf("after the refilled token: %d Retry-After %q; want 429 and 1", w.Code, w.Header().Get("Retry-After"))
	}

	// At 1 rpm the wait for the next token is a minute.
	mustAuth(t, a, request(remote, HeaderAPIKey, slow))
	clock.Advance(15 * time.Second)
	if w := mustFail(t, a, request(remote, HeaderAPIKey, slow)); w.Header().Get("Retry-After") != "45" {
		t.Errorf("1 rpm, 15s after: Retry-After %q, want 45", w.Header().Get("Retry-After"))
	}
}

func TestRateLimitChange(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "k", RateLimitRPM: 100})
	clock := newFakeClock()
	a := newAuth(t, Options{Keys: s, Now: clock.Now})
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))

	k, err := s.GetKeyByAlias(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	k.RateLimitRPM = 2
	if _, err := s.UpdateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	a.Invalidate("k")
	// The bucket shrinks to the new capacity at once.
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusTooManyRequests {
		t.Errorf("after lowering the limit: status %d, want 429", w.Code)
	}
}

// A request another replica forwarded (its limits taken there) takes
// nothing from the buckets; it is still refused for everything else.
func TestRateCountedElsewhere(t *testing.T) {
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "k", RateLimitRPM: 2})
	a := newAuth(t, Options{Keys: s, Now: newFakeClock().Now})
	counted := func(r *http.Request) *http.Request { return r.WithContext(WithRateCounted(r.Context())) }
	for range 5 {
		mustAuth(t, a, counted(request(remote, HeaderAPIKey, secret)))
	}
	if w := mustFail(t, a, counted(request(remote, HeaderAPIKey, "mcpg_not-a-key"))); w.Code != http.StatusUnauthorized {
		t.Errorf("an unknown key, counted elsewhere: %d", w.Code)
	}
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusTooManyRequests {
		t.Errorf("the bucket after counted requests: %d, want 429 only after its own 2", w.Code)
	}
}

func TestIdleBucketsAreDropped(t *testing.T) {
	var l limiter
	t0 := newFakeClock().Now()
	for i := range 100 {
		l.allow(fmt.Sprint("key", i), 10, t0)
	}
	l.allow("busy", 10, t0.Add(5*time.Minute))
	if got := l.len(); got != 101 {
		t.Fatalf("buckets = %d, want 101", got)
	}
	l.allow("busy", 10, t0.Add(bucketIdle))
	if got := l.len(); got != 1 {
		t.Errorf("buckets after %v idle = %d, want 1", bucketIdle, got)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 1},
		{time.Nanosecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{59500 * time.Millisecond, 60},
	} {
		if got := retryAfterSeconds(tt.d); got != tt.want {
			t.Errorf("retryAfterSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestOwner(t *testing.T) {
	s := openStore(t)
	k1 := addKey(t, s, store.Key{Alias: "one", User: "alice"})
	k2 := addKey(t, s, store.Key{Alias: "two", User: "alice"})
	a := newAuth(t, Options{Keys: s, MasterKey: master, Anonymous: true})
	const ip1, ip2 = "198.51.100.23", "2001:db8::42"

	owner := func(remote string, kv ...string) string {
		t.Helper()
		return mustAuth(t, a, request(remote, kv...)).Owner
	}
	k1a := owner(ip1+":1000", HeaderAPIKey, k1)
	k1b := owner("["+ip2+"]:2000", "Authorization", "Bearer "+k1)
	k2a := owner(ip1+":1000", HeaderAPIKey, k2)
	m := owner(ip1+":1000", HeaderAPIKey, master)
	oauthA := owner(ip1+":1000", "Authorization", "Bearer token-a")
	oauthB := owner(ip1+":1000", "Authorization", "Bearer token-b")
	ipA := owner(ip1 + ":1000")
	ipA2 := owner(ip1 + ":9999")
	ipB := owner("[" + ip2 + "]:1000")
	anon := owner("")

	if k1a != k1b {
		t.Errorf("same key, different header and address: owners %q and %q", k1a, k1b)
	}
	if ipA != ipA2 {
		t.Errorf("same address, different port: owners %q and %q", ipA, ipA2)
	}
	if anon != OwnerAnonymous {
		t.Errorf("no key, token or address: owner %q, want %q", anon, OwnerAnonymous)
	}
	all := map[string]string{"k1": k1a, "k2": k2a, "master": m, "oauthA": oauthA, "oauthB": oauthB, "ipA": ipA, "ipB": ipB, "anon": anon}
	seen := map[string]string{}
	for name, o := range all {
		if other, dup := seen[o]; dup {
			t.Errorf("owners of %s and %s are both %q", name, other, o)
		}
		seen[o] = name
		for _, secret := range []string{k1, k2, master, store.HashKey(k1), store.HashKey(k2), "token-a", "token-b", ip1, ip2, "alice"} {
			if strings.Contains(o, secret) {
				t.Errorf("owner of %s %q contains %q", name, o, secret)
			}
		}
	}
	for name, prefix := range map[string]string{"k1": OwnerKey, "k2": OwnerKey, "master": OwnerKey, "oauthA": OwnerOAuth, "ipA": OwnerIP, "ipB": OwnerIP} {
		if !strings.HasPrefix(all[name], prefix) {
			t.Errorf("owner of %s %q; want prefix %q", name, all[name], prefix)
		}
	}

	// Callers built elsewhere (a JWT authenticator) are owned by their user.
	u := OwnerOf(&Caller{User: "alice"}, request(ip1+":1", "Authorization", "Bearer jwt"))
	if !strings.HasPrefix(u, OwnerUser) || strings.Contains(u, "alice") {
		t.Errorf("user owner %q", u)
	}
	if u2 := OwnerOf(&Caller{User: "bob"}, request(ip1+":1")); u2 == u {
		t.Errorf("different users share owner %q", u)
	}
	if got := OwnerOf(nil, request(ip1+":1")); got != ipA {
		t.Errorf("OwnerOf(nil) = %q, want %q", got, ipA)
	}
}

// TestTouch: last_used_at is written at most once a minute per key, by the
// background worker.
func TestTouch(t *testing.T) {
	s := openStore(t)
	k1 := addKey(t, s, store.Key{Alias: "one"})
	k2 := addKey(t, s, store.Key{Alias: "two"})
	spy := &spyKeys{next: s}
	clock := newFakeClock()
	a := newAuth(t, Options{Keys: spy, MasterKey: master, Now: clock.Now})
	t0 := clock.Now()

	for range 100 {
		mustAuth(t, a, request(remote, HeaderAPIKey, k1))
		mustAuth(t, a, request(remote, HeaderAPIKey, k2))
		mustAuth(t, a, request(remote, HeaderAPIKey, master))
	}
	waitFor(t, "two touches", func() bool { return len(spy.touched()) >= 2 })

	clock.Advance(30 * time.Second)
	for range 100 {
		mustAuth(t, a, request(remote, HeaderAPIKey, k1))
	}
	clock.Advance(31 * time.Second)
	mustAuth(t, a, request(remote, HeaderAPIKey, k1))
	waitFor(t, "the third touch", func() bool { return len(spy.touched()) >= 3 })

	// Had the requests at +30s touched, the third touch would be at +30s
	// and the one at +61s would have been suppressed.
	got := spy.touched()
	byAlias := map[string][]time.Time{}
	for _, c := range got {
		byAlias[c.alias] = append(byAlias[c.alias], c.at)
	}
	want := map[string][]time.Time{"one": {t0, t0.Add(61 * time.Second)}, "two": {t0}}
	if !reflect.DeepEqual(byAlias, want) {
		t.Errorf("touches = %v, want %v", byAlias, want)
	}
	// The spy counts a touch as it starts; the store has it once the
	// write behind it ends.
	waitFor(t, "last_used_at stored as the third touch's time", func() bool {
		k, err := s.GetKeyByAlias(context.Background(), "one")
		if err != nil {
			t.Fatal(err)
		}
		return k.LastUsedAt.Equal(t0.Add(61 * time.Second))
	})
}

// TestTouchOffRequestPath: a store that never finishes a touch does not
// hold up requests, and Close still returns.
func TestTouchOffRequestPath(t *testing.T) {
	s := openStore(t)
	k1 := addKey(t, s, store.Key{Alias: "one"})
	k2 := addKey(t, s, store.Key{Alias: "two"})
	entered := make(chan struct{}, 10)
	spy := &spyKeys{next: s, touchKey: func(ctx context.Context, alias string, at time.Time) error {
		entered <- struct{}{}
		<-ctx.Done() // blocks until Close
		return ctx.Err()
	}}
	clock := newFakeClock()
	a := New(Options{Keys: spy, Now: clock.Now})

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			for _, k := range []string{k1, k2} {
				if _, f := a.Authenticate(request(remote, HeaderAPIKey, k)); f != nil {
					t.Errorf("Authenticate: %d", f.Status)
				}
			}
			clock.Advance(touchEvery) // every request asks for a touch
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests blocked on a stuck TouchKey")
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("TouchKey was never called")
	}

	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a stuck TouchKey")
	}
	a.Close() // twice is fine
	if n := len(spy.touched()); n != 1 {
		t.Errorf("TouchKey calls with the first stuck = %d, want 1", n)
	}
}

func TestClientIP(t *testing.T) {
	for _, tt := range []struct{ remote, want string }{
		{"192.0.2.1:1234", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:DB8:0:0::1]:443", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[fe80::1%eth0]:80", "fe80::1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"2001:db8::1", "2001:db8::1"},
		{"", ""},
		{"@", "@"},
		{"host.example:80", "host.example"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tt.remote
		if got := ClientIP(r); got != tt.want {
			t.Errorf("ClientIP(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

func TestContext(t *testing.T) {
	if c := FromContext(context.Background()); c != nil {
		t.Errorf("FromContext(empty) = %+v", c)
	}
	c := &Caller{Alias: "x"}
	if got := FromContext(NewContext(context.Background(), c)); got != c {
		t.Errorf("FromContext = %+v, want %+v", got, c)
	}
}

// A key that expires while a stream is open is no longer valid for it;
// the master key and anonymous callers always are.
func TestStillValidExpiry(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	now := time.Now()
	secret := addKey(t, s, store.Key{Alias: "brief", ExpiresAt: now.Add(time.Minute)})
	a := newAuth(t, Options{Keys: s, MasterKey: master, Anonymous: true})
	c := mustAuth(t, a, request(remote, HeaderAPIKey, secret))
	if !a.StillValid(ctx, c) {
		t.Fatal("valid key reported invalid")
	}
	a.now = func() time.Time { return now.Add(2 * time.Minute) }
	if a.StillValid(ctx, c) {
		t.Error("expired key still valid")
	}
	for _, r := range []*http.Request{request(remote, HeaderAPIKey, master), request(remote)} {
		if c := mustAuth(t, a, r); !a.StillValid(ctx, c) {
			t.Errorf("%+v reported invalid", c)
		}
	}
}

// AllowCall takes from the bucket Authenticate takes from (a request and
// the calls it carries share one limit), takes nothing for a request
// another replica counted, and nothing for a caller without a limit.
func TestAllowCallSharesTheKeysBucket(t *testing.T) {
	s := openStore(t)
	secret := addKey(t, s, store.Key{Alias: "k", RateLimitRPM: 3})
	a := newAuth(t, Options{Keys: s, Now: newFakeClock().Now})
	c := mustAuth(t, a, request(remote, HeaderAPIKey, secret)) // 1 of 3
	ctx := context.Background()
	if ok, _ := a.AllowCall(WithRateCounted(ctx), c); !ok {
		t.Error("a call another replica counted was refused")
	}
	for i := range 2 { // 2 and 3 of 3
		if ok, _ := a.AllowCall(ctx, c); !ok {
			t.Fatalf("call %d of 3 refused", i+2)
		}
	}
	if ok, wait := a.AllowCall(ctx, c); ok || wait <= 0 {
		t.Errorf("a fourth request: allowed %v, wait %v; want refused with a wait", ok, wait)
	}
	if w := mustFail(t, a, request(remote, HeaderAPIKey, secret)); w.Code != http.StatusTooManyRequests {
		t.Errorf("an HTTP request after the calls spent the bucket: %d, want 429", w.Code)
	}
	if ok, _ := a.AllowCall(ctx, &Caller{Alias: "free"}); !ok {
		t.Error("a caller without a limit was refused")
	}
}

// Every refusal says why in Failure.Reason (for the access log), while
// the bytes a caller sees stay the same (TestRejectedKeysAreIndistinguishable);
// the reason never names the key or its alias.
func TestRefusalReasons(t *testing.T) {
	s := openStore(t)
	clock := newFakeClock()
	disabled := addKey(t, s, store.Key{Alias: "alias-disabled", Disabled: true})
	expired := addKey(t, s, store.Key{Alias: "alias-expired", ExpiresAt: clock.Now().Add(-time.Hour)})
	limited := addKey(t, s, store.Key{Alias: "alias-limited", AllowedCIDRs: []string{"10.0.0.0/8"}})
	revoked := addKey(t, s, store.Key{Alias: "alias-revoked"})
	if err := s.DeleteKey(context.Background(), "alias-revoked"); err != nil {
		t.Fatal(err)
	}
	unknown, _ := NewSecret()
	a := newAuth(t, Options{Keys: s, MasterKey: master, Now: clock.Now})

	for _, tc := range []struct {
		name   string
		r      *http.Request
		status int
		reason string
	}{
		{"missing", request(remote), 401, RefusedNoKey},
		{"unknown", request(remote, HeaderAPIKey, unknown), 401, RefusedUnknown},
		{"unknown in Authorization", request(remote, "Authorization", "Bearer "+unknown), 401, RefusedUnknown},
		{"revoked", request(remote, HeaderAPIKey, revoked), 401, RefusedUnknown},
		{"disabled", request(remote, HeaderAPIKey, disabled), 401, RefusedDisabled},
		{"expired", request(remote, HeaderAPIKey, expired), 401, RefusedExpired},
		{"too long", request(remote, HeaderAPIKey, strings.Repeat("x", 4096)), 401, RefusedMalformed},
		{"address", request("11.0.0.1:4000", HeaderAPIKey, limited), 403, RefusedAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := a.Authenticate(tc.r)
			if c != nil || f == nil {
				t.Fatalf("got caller %+v, want a refusal", c)
			}
			if f.Status != tc.status || f.Reason != tc.reason {
				t.Errorf("refusal %d %q, want %d %q", f.Status, f.Reason, tc.status, tc.reason)
			}
			for _, leak := range []string{"alias-", unknown, disabled, expired, revoked, limited} {
				if strings.Contains(f.Reason, leak) {
					t.Errorf("reason %q names the key (%q)", f.Reason, leak)
				}
			}
		})
	}
}

// AnonymousRequest says true only for requests Authenticate serves as the
// anonymous caller it builds from the request alone, and the caller is
// then exactly {Anonymous: true} with OwnerOf's owner: the gateway gives
// such requests a caller remembered per address instead of calling
// Authenticate, so the two must never differ.
func TestAnonymousRequestAsAuthenticate(t *testing.T) {
	s := openStore(t)
	key := addKey(t, s, store.Key{Alias: "alice"})
	open := newAuth(t, Options{Keys: s, MasterKey: master, Anonymous: true})
	closed := newAuth(t, Options{Keys: s, MasterKey: master})
	for _, tc := range []struct {
		name    string
		headers []string
		want    bool
	}{
		{"no credentials", nil, true},
		{"blank key header", []string{HeaderAPIKey, " \t"}, true},
		{"basic authorization", []string{"Authorization", "Basic dXNlcjpwYXNz"}, true},
		{"bearer without a token", []string{"Authorization", "Bearer  "}, true},
		{"other headers", []string{"Mcp-Session-Id", "x", "X-Forwarded-For", "10.0.0.9"}, true},
		{"an upstream bearer token", []string{"Authorization", "Bearer upstream"}, false},
		{"a key in Authorization", []string{"Authorization", "Bearer " + key}, false},
		{"a key header", []string{HeaderAPIKey, key}, false},
		{"a wrong key header", []string{HeaderAPIKey, "mcpg_wrong"}, false},
		{"the master key", []string{HeaderAPIKey, master}, false},
	} {
		for _, remote := range []string{"192.0.2.7:4000", "[2001:db8::7]:4000", "[::ffff:192.0.2.7]:4000", "not an address"} {
			r := request(remote, tc.headers...)
			if got := open.AnonymousRequest(r); got != tc.want {
				t.Errorf("%s from %s: AnonymousRequest %v, want %v", tc.name, remote, got, tc.want)
				continue
			}
			if closed.AnonymousRequest(r) {
				t.Errorf("%s from %s: anonymous on a gateway that serves no anonymous caller", tc.name, remote)
			}
			if !tc.want {
				continue
			}
			c, f := open.Authenticate(r)
			if f != nil {
				t.Fatalf("%s from %s: Authenticate refused: %d %s", tc.name, remote, f.Status, f.Body)
			}
			want := Caller{Anonymous: true}
			want.Owner = OwnerOf(&want, r)
			if !reflect.DeepEqual(*c, want) {
				t.Errorf("%s from %s: Authenticate gave %+v, want %+v", tc.name, remote, *c, want)
			}
		}
	}
}
