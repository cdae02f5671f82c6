package vault

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

func testKey(id string, fill byte) config.VaultKey {
	return config.VaultKey{ID: id, Key: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, 32))}
}

var (
	k1 = testKey("k1", 1)
	k2 = testKey("k2", 2)
)

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	c := newClock()
	v := newVault(t, st, c, k1)

	if _, err := v.Get(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get before put: %v", err)
	}
	e := oauthEntry("alice", "github")
	if err := v.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	static := Entry{Person: "alice", Server: "linear", Kind: KindStatic, AccessToken: "lin_api_xyz", Header: "Authorization"}
	if err := v.Put(ctx, static); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, oauthEntry("bob", "github")); err != nil {
		t.Fatal(err)
	}

	got, err := v.Get(ctx, "alice", "github")
	if err != nil {
		t.Fatal(err)
	}
	want := e
	want.UpdatedAt = c.now()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("get (-want +got):\n%s", diff)
	}
	if got, err := v.Get(ctx, "alice", "linear"); err != nil || got.AccessToken != "lin_api_xyz" || got.Header != "Authorization" || got.Kind != KindStatic {
		t.Errorf("static: %+v, %v", got, err)
	}
	// Per person: bob's github entry is his own.
	if got, _ := v.Get(ctx, "bob", "github"); got.AccessToken != "gho_access_bob_github" {
		t.Errorf("bob's token %q", got.AccessToken)
	}

	// Replace.
	c.add(time.Minute)
	e.AccessToken = "gho_new"
	if err := v.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Get(ctx, "alice", "github"); got.AccessToken != "gho_new" || !got.UpdatedAt.Equal(c.now()) {
		t.Errorf("replaced: %+v", got)
	}

	metas, err := v.List(ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var who []string
	for _, m := range metas {
		who = append(who, m.Person+"/"+m.Server)
		if m.KeyID != "k1" {
			t.Errorf("%s: key %q", m.Person, m.KeyID)
		}
	}
	if diff := cmp.Diff([]string{"alice/github", "alice/linear", "bob/github"}, who); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if m := metas[0]; m.Issuer != e.Issuer || !m.HasRefreshToken || !cmp.Equal(m.Scopes, e.Scopes) || !m.Expiry.Equal(e.Expiry) || m.Kind != KindOAuth {
		t.Errorf("meta %+v", m)
	}
	// Meta holds no secret, whatever it prints as.
	if b, _ := json.Marshal(metas); bytes.Contains(b, []byte("gho_")) || bytes.Contains(b, []byte("ghr_")) || bytes.Contains(b, []byte("lin_api")) {
		t.Errorf("list leaks a secret: %s", b)
	}
	if m, _ := v.List(ctx, Filter{Person: "alice"}); len(m) != 2 {
		t.Errorf("filter person: %d", len(m))
	}
	if m, _ := v.List(ctx, Filter{Server: "github"}); len(m) != 2 {
		t.Errorf("filter server: %d", len(m))
	}
	if m, _ := v.List(ctx, Filter{Person: "bob", Server: "linear"}); len(m) != 0 {
		t.Errorf("filter both: %d", len(m))
	}

	if err := v.Delete(ctx, "alice", "github"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if err := v.Delete(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete twice: %v", err)
	}

	// A new Vault on the same store (a restart) reads the entries.
	v2 := newVault(t, st, nil, k1)
	if got, err := v2.Get(ctx, "bob", "github"); err != nil || got.RefreshToken != "ghr_refresh_bob_github" {
		t.Errorf("after restart: %+v, %v", got, err)
	}
}

func TestEntryNeverPrintsSecrets(t *testing.T) {
	e := oauthEntry("alice", "github")
	for _, s := range []string{fmt.Sprint(e), fmt.Sprintf("%v %+v %#v %s", e, e, e, e)} {
		if strings.Contains(s, "gho_") || strings.Contains(s, "ghr_") {
			t.Errorf("printed: %s", s)
		}
	}
}

func TestPutInvalid(t *testing.T) {
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, nil, k1)
	for name, e := range map[string]Entry{
		"no person":         {Server: "s", Kind: KindStatic, AccessToken: "x"},
		"no server":         {Person: "p", Kind: KindStatic, AccessToken: "x"},
		"no kind":           {Person: "p", Server: "s", AccessToken: "x"},
		"bad kind":          {Person: "p", Server: "s", Kind: "byok", AccessToken: "x"},
		"static no token":   {Person: "p", Server: "s", Kind: KindStatic},
		"static refresh":    {Person: "p", Server: "s", Kind: KindStatic, AccessToken: "x", RefreshToken: "y"},
		"bad header":        {Person: "p", Server: "s", Kind: KindStatic, AccessToken: "x", Header: "X Key"},
		"oauth no tokens":   {Person: "p", Server: "s", Kind: KindOAuth},
		"oauth header":      {Person: "p", Server: "s", Kind: KindOAuth, AccessToken: "x", Header: "X-Key"},
		"control character": {Person: "p", Server: "s", Kind: KindStatic, AccessToken: "x\ny"},
		"huge":              {Person: "p", Server: "s", Kind: KindStatic, AccessToken: strings.Repeat("a", maxSealed)},
	} {
		err := v.Put(context.Background(), e)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
		if err != nil && e.AccessToken != "" && strings.Contains(err.Error(), e.AccessToken) {
			t.Errorf("%s: the error echoes the credential: %v", name, err)
		}
	}
}

func TestNewRejectsBadKeys(t *testing.T) {
	for name, keys := range map[string][]config.VaultKey{
		"none":      nil,
		"duplicate": {k1, k1},
		"bad id":    {{ID: "a b", Key: k1.Key}},
		"short key": {{ID: "k", Key: base64.StdEncoding.EncodeToString([]byte("short"))}},
	} {
		if _, err := New(nil, keys, nil); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), k1.Key) {
			t.Errorf("%s: the error echoes the key: %v", name, err)
		}
	}
}

func TestWrongOrMissingKey(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	if err := newVault(t, st, nil, k1).Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	objs, _ := st.ListObjects(ctx, store.KindVault)
	if len(objs) != 1 {
		t.Fatalf("%d objects", len(objs))
	}

	// The same id with another key: the record is found (by List) but
	// does not open.
	other := newVault(t, st, nil, testKey("k1", 9))
	_, err := other.List(ctx, Filter{})
	if !errors.Is(err, ErrDecrypt) || !strings.Contains(err.Error(), `key id "k1"`) {
		t.Errorf("wrong key: %v", err)
	}
	// Its names differ too (the naming key is derived from the key), so
	// Get does not find the entry at all.
	if _, err := other.Get(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get with the wrong key: %v", err)
	}
	// A record whose key id is not configured, under a name the ring
	// knows: say which id is missing.
	missing := newVault(t, st, nil, k2, testKey("k1", 9))
	name := missing.ring.byID["k1"].name("alice", "github")
	if _, err := st.PutObject(ctx, store.KindVault, name, mustRecord(t, objs[0].Doc, func(r *record) { r.KID = "k0" })); err != nil {
		t.Fatal(err)
	}
	_, err = missing.Get(ctx, "alice", "github")
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), `"k0"`) {
		t.Errorf("missing key id: %v", err)
	}
	if _, err := missing.Rotate(ctx); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("rotate with a missing key: %v", err)
	}
}

func mustRecord(t *testing.T, doc []byte, edit func(*record)) []byte {
	t.Helper()
	r, err := decodeRecord(doc)
	if err != nil {
		t.Fatal(err)
	}
	edit(&r)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRotate(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()

	old := newVault(t, st, nil, k1)
	people := []string{"alice", "bob", "carol"}
	for _, p := range people {
		if err := old.Put(ctx, oauthEntry(p, "github")); err != nil {
			t.Fatal(err)
		}
	}
	kids := func() map[string]int {
		objs, err := st.ListObjects(ctx, store.KindVault)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, o := range objs {
			r, err := decodeRecord(o.Doc)
			if err != nil {
				t.Fatal(err)
			}
			n[r.KID]++
		}
		return n
	}
	readAll := func(v *Vault) {
		t.Helper()
		for _, p := range people {
			got, err := v.Get(ctx, p, "github")
			if err != nil || got.AccessToken != "gho_access_"+p+"_github" {
				t.Errorf("%s: %+v, %v", p, got, err)
			}
		}
	}

	// New key first: old entries still read, new writes use k2.
	both := newVault(t, st, nil, k2, k1)
	readAll(both)
	if err := both.Put(ctx, oauthEntry("dave", "github")); err != nil {
		t.Fatal(err)
	}
	people = append(people, "dave")
	if diff := cmp.Diff(map[string]int{"k1": 3, "k2": 1}, kids()); diff != "" {
		t.Errorf("before rotate (-want +got):\n%s", diff)
	}
	if m, err := both.List(ctx, Filter{}); err != nil || len(m) != 4 {
		t.Errorf("list before rotate: %d, %v", len(m), err)
	}

	n, err := both.Rotate(ctx)
	if err != nil || n != 3 {
		t.Fatalf("rotate: %d, %v", n, err)
	}
	if diff := cmp.Diff(map[string]int{"k2": 4}, kids()); diff != "" {
		t.Errorf("after rotate (-want +got):\n%s", diff)
	}
	readAll(both)
	if n, err := both.Rotate(ctx); err != nil || n != 0 {
		t.Errorf("second rotate: %d, %v", n, err)
	}

	// The old key can go.
	only := newVault(t, st, nil, k2)
	readAll(only)
	m, err := only.List(ctx, Filter{})
	if err != nil || len(m) != 4 {
		t.Fatalf("list with k2 only: %d, %v", len(m), err)
	}
	for _, e := range m {
		if e.KeyID != "k2" {
			t.Errorf("%s sealed with %s", e.Person, e.KeyID)
		}
	}
	// And the vault with k1 alone reads nothing any more.
	if _, err := newVault(t, st, nil, k1).Get(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("k1 alone after rotation: %v", err)
	}
}

// A write interrupted between putting the new copy and removing the old
// one leaves both; reads, lists and Rotate prefer the new one.
func TestRotateLeftoverCopy(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	if err := newVault(t, st, nil, k1).Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	both := newVault(t, st, nil, k2, k1)
	newer := oauthEntry("alice", "github")
	newer.AccessToken = "gho_newer"
	name, doc, err := both.ring.seal(toPlain(newer))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutObject(ctx, store.KindVault, name, doc); err != nil {
		t.Fatal(err)
	}
	if got, _ := both.Get(ctx, "alice", "github"); got.AccessToken != "gho_newer" {
		t.Errorf("get: %q", got.AccessToken)
	}
	if m, err := both.List(ctx, Filter{}); err != nil || len(m) != 1 || m[0].KeyID != "k2" {
		t.Errorf("list: %+v, %v", m, err)
	}
	if n, err := both.Rotate(ctx); err != nil || n != 0 {
		t.Errorf("rotate: %d, %v", n, err)
	}
	if objs, _ := st.ListObjects(ctx, store.KindVault); len(objs) != 1 {
		t.Errorf("%d objects after rotate", len(objs))
	}
	if got, _ := newVault(t, st, nil, k2).Get(ctx, "alice", "github"); got.AccessToken != "gho_newer" {
		t.Errorf("after rotate: %q", got.AccessToken)
	}
}

func TestSwappedRecordDoesNotDecrypt(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, nil, k1)
	for _, p := range []string{"alice", "mallory"} {
		if err := v.Put(ctx, oauthEntry(p, "github")); err != nil {
			t.Fatal(err)
		}
	}
	k := v.ring.primary()
	mallory, err := st.GetObject(ctx, store.KindVault, k.name("mallory", "github"))
	if err != nil {
		t.Fatal(err)
	}
	// Mallory's record copied onto alice's name: it must not open as
	// alice's entry (nor as mallory's token served to alice).
	if _, err := st.PutObject(ctx, store.KindVault, k.name("alice", "github"), mallory.Doc); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Get(ctx, "alice", "github"); !errors.Is(err, ErrDecrypt) {
		t.Errorf("swapped record: %+v, %v", got, err)
	}
	// The same for another server of the same person.
	if err := v.Put(ctx, oauthEntry("mallory", "linear")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutObject(ctx, store.KindVault, k.name("mallory", "linear"), mallory.Doc); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, "mallory", "linear"); !errors.Is(err, ErrDecrypt) {
		t.Errorf("record moved across servers: %v", err)
	}
	// A flipped ciphertext byte.
	tampered := mustRecord(t, mallory.Doc, func(r *record) { r.Ciphertext[3] ^= 1 })
	if _, err := st.PutObject(ctx, store.KindVault, k.name("mallory", "github"), tampered); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, "mallory", "github"); !errors.Is(err, ErrDecrypt) {
		t.Errorf("tampered record: %v", err)
	}
}

// Neither the tokens nor the person id are in the database file, its
// WAL, or the object names.
func TestNothingInTheClearOnDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	c := newClock()
	v := newVault(t, st, c, k1)
	person := "alice.liddell@example.com"
	secrets := []string{person, "gho_SECRETaccess0123456789", "ghr_SECRETrefresh0123456789", "lin_SECRETstatic0123456789"}
	e := oauthEntry(person, "github")
	e.AccessToken, e.RefreshToken = secrets[1], secrets[2]
	if err := v.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, Entry{Person: person, Server: "linear", Kind: KindStatic, AccessToken: secrets[3]}); err != nil {
		t.Fatal(err)
	}
	c.add(2 * TouchInterval)
	if err := v.Touch(ctx, person, "github"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Refresh(ctx, person, "github", func(_ context.Context, e Entry) (Entry, error) {
		e.Expiry = e.Expiry.Add(time.Hour)
		return e, nil
	}); err != nil {
		t.Fatal(err)
	}
	objs, _ := st.ListObjects(ctx, store.KindVault)
	for _, o := range objs {
		if strings.Contains(o.Name, "alice") {
			t.Errorf("object name %s", o.Name)
		}
	}

	check := func(when string) {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, sqlite.FileName+"*"))
		records := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			records = records || bytes.Contains(b, []byte(`"kid":"k1"`))
			for _, s := range secrets {
				// Also as the JSON escaping or base64 of a careless
				// encoder would write it.
				for _, form := range []string{s, base64.StdEncoding.EncodeToString([]byte(s)), "alice"} {
					if bytes.Contains(b, []byte(form)) {
						t.Errorf("%s: %s holds %q in the clear", when, filepath.Base(f), form)
					}
				}
			}
		}
		if !records {
			t.Fatalf("%s: no file read holds the records: the check reads the wrong files", when)
		}
	}
	check("open")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed")
}

func TestTouchCoalesced(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	c := newClock()
	v := newVault(t, st, c, k1)
	if err := v.Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	version := func() int64 {
		o, err := st.GetObject(ctx, store.KindVault, v.ring.primary().name("alice", "github"))
		if err != nil {
			t.Fatal(err)
		}
		return o.Version
	}
	v0 := version()
	put := c.now()
	c.add(time.Second)
	first := c.now()
	if err := v.Touch(ctx, "alice", "github"); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		c.add(time.Second)
		if err := v.Touch(ctx, "alice", "github"); err != nil {
			t.Fatal(err)
		}
	}
	if got := version(); got != v0+1 {
		t.Errorf("11 touches in 11 s wrote %d times", got-v0)
	}
	got, _ := v.Get(ctx, "alice", "github")
	if !got.LastUsed.Equal(first) || !got.UpdatedAt.Equal(put) {
		t.Errorf("last used %v (want %v), updated %v (want %v)", got.LastUsed, first, got.UpdatedAt, put)
	}
	c.add(TouchInterval)
	if err := v.Touch(ctx, "alice", "github"); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Get(ctx, "alice", "github"); !got.LastUsed.Equal(c.now()) {
		t.Errorf("after the interval: %v", got.LastUsed)
	}
	if m, _ := v.List(ctx, Filter{}); len(m) != 1 || !m[0].LastUsed.Equal(c.now()) {
		t.Errorf("list last used: %+v", m)
	}
	if err := v.Touch(ctx, "nobody", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("touch missing: %v", err)
	}
}

func TestRefreshOnceForManyWaiters(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	c := newClock()
	v := newVault(t, st, c, k1)
	if err := v.Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	const waiters = 20
	var calls atomic.Int32
	release := make(chan struct{})
	fn := func(ctx context.Context, e Entry) (Entry, error) {
		calls.Add(1)
		<-release
		e.AccessToken = "gho_refreshed"
		e.Expiry = e.Expiry.Add(time.Hour)
		return e, nil
	}
	var wg sync.WaitGroup
	results := make([]Entry, waiters)
	errs := make([]error, waiters)
	for i := range waiters {
		wg.Go(func() { results[i], errs[i] = v.Refresh(ctx, "alice", "github", fn) })
	}
	// Wait until every caller joined the one flight, then let it finish.
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		n := 0
		if f := v.flights[memID("alice", "github")]; f != nil {
			n = f.waiters
		}
		v.mu.Unlock()
		if n == waiters {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d callers joined", n, waiters)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Errorf("refresh ran %d times", n)
	}
	for i := range waiters {
		if errs[i] != nil || results[i].AccessToken != "gho_refreshed" {
			t.Errorf("caller %d: %+v, %v", i, results[i], errs[i])
		}
	}
	if got, _ := v.Get(ctx, "alice", "github"); got.AccessToken != "gho_refreshed" || !got.Expiry.Equal(time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC)) {
		t.Errorf("stored %+v", got)
	}
	if len(v.flights) != 0 || len(v.locks) != 0 {
		t.Errorf("left %d flights, %d locks", len(v.flights), len(v.locks))
	}

	// A later refresh runs again, and sees the stored entry.
	_, err := v.Refresh(ctx, "alice", "github", func(_ context.Context, e Entry) (Entry, error) {
		calls.Add(1)
		if e.AccessToken != "gho_refreshed" {
			t.Errorf("second refresh saw %q", e.AccessToken)
		}
		return e, nil // unchanged: not rewritten
	})
	if err != nil || calls.Load() != 2 {
		t.Errorf("second refresh: %v, %d calls", err, calls.Load())
	}
}

func TestRefreshErrors(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, nil, k1)
	if err := v.Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	bad := errors.New("invalid_grant")
	if _, err := v.Refresh(ctx, "alice", "github", func(context.Context, Entry) (Entry, error) { return Entry{}, bad }); !errors.Is(err, bad) {
		t.Errorf("fn error: %v", err)
	}
	if _, err := v.Refresh(ctx, "alice", "github", func(context.Context, Entry) (Entry, error) { panic("boom") }); err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Errorf("panic: %v", err)
	}
	if _, err := v.Refresh(ctx, "alice", "github", func(_ context.Context, e Entry) (Entry, error) { e.Person = "bob"; return e, nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("person changed: %v", err)
	}
	if _, err := v.Refresh(ctx, "nobody", "github", func(_ context.Context, e Entry) (Entry, error) { return e, nil }); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing entry: %v", err)
	}
	if got, _ := v.Get(ctx, "alice", "github"); got.AccessToken != "gho_access_alice_github" {
		t.Errorf("failed refreshes changed the entry: %q", got.AccessToken)
	}

	// A caller that gives up returns at once; the run still completes
	// and stores its result.
	release := make(chan struct{})
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := v.Refresh(cctx, "alice", "github", func(ctx context.Context, e Entry) (Entry, error) {
			<-release
			if ctx.Err() != nil {
				return e, ctx.Err()
			}
			e.AccessToken = "gho_after_cancel"
			return e, nil
		})
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled caller: %v", err)
	}
	close(release)
	got, err := v.Refresh(ctx, "alice", "github", func(_ context.Context, e Entry) (Entry, error) { return e, nil })
	if err != nil || got.AccessToken != "gho_after_cancel" {
		t.Errorf("after cancel: %q, %v", got.AccessToken, err)
	}
}

// Many goroutines putting, reading, touching and refreshing the same and
// different entries: -race clean, and every read decrypts.
func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	c := newClock()
	v := newVault(t, st, c, k2, k1)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			person := fmt.Sprintf("p%d", g%3)
			for i := range 20 {
				e := oauthEntry(person, "github")
				e.AccessToken = fmt.Sprintf("gho_%d_%d", g, i)
				if err := v.Put(ctx, e); err != nil {
					t.Error(err)
					return
				}
				if _, err := v.Get(ctx, person, "github"); err != nil {
					t.Error(err)
				}
				c.add(time.Second)
				if err := v.Touch(ctx, person, "github"); err != nil {
					t.Error(err)
				}
				if _, err := v.Refresh(ctx, person, "github", func(_ context.Context, e Entry) (Entry, error) {
					e.Expiry = e.Expiry.Add(time.Minute)
					return e, nil
				}); err != nil {
					t.Error(err)
				}
				if i%5 == 0 {
					if _, err := v.Rotate(ctx); err != nil {
						t.Error(err)
					}
					if _, err := v.List(ctx, Filter{}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if m, err := v.List(ctx, Filter{}); err != nil || len(m) != 3 {
		t.Errorf("list: %d, %v", len(m), err)
	}
}

// countingObjects counts the store reads of entries.
type countingObjects struct {
	store.Objects
	gets atomic.Int32
}

func (c *countingObjects) GetObject(ctx context.Context, kind, name string) (store.Object, error) {
	c.gets.Add(1)
	return c.Objects.GetObject(ctx, kind, name)
}

// Get serves an entry it decrypted from memory for readTTL: egress asks
// on every call. This process's writes and deletes are seen at once;
// another process's (a second Vault on the same store) after readTTL. A
// returned entry cannot change the cached one.
func TestGetIsCached(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	objs := &countingObjects{Objects: st}
	c := newClock()
	v := newVault(t, objs, c, k1)
	other := newVault(t, st, c, k1)
	e := oauthEntry("alice", "gh")
	if err := v.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	before := objs.gets.Load()
	for range 5 {
		got, err := v.Get(ctx, "alice", "gh")
		if err != nil || got.AccessToken != e.AccessToken {
			t.Fatalf("get: %v %v", got, err)
		}
		got.Scopes[0] = "changed"
	}
	if n := objs.gets.Load() - before; n != 1 {
		t.Errorf("%d store reads for 5 gets, want 1", n)
	}
	if got, _ := v.Get(ctx, "alice", "gh"); got.Scopes[0] != "repo" {
		t.Errorf("a returned entry changed the cached one: %v", got.Scopes)
	}
	e.AccessToken = "gho_new"
	if err := v.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Get(ctx, "alice", "gh"); got.AccessToken != "gho_new" {
		t.Errorf("this process's write not seen: %q", got.AccessToken)
	}
	e.AccessToken = "gho_other"
	if err := other.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Get(ctx, "alice", "gh"); got.AccessToken != "gho_new" {
		t.Errorf("within readTTL the cached entry stands: %q", got.AccessToken)
	}
	c.add(readTTL)
	if got, _ := v.Get(ctx, "alice", "gh"); got.AccessToken != "gho_other" {
		t.Errorf("another process's write not seen after readTTL: %q", got.AccessToken)
	}
	if err := v.Delete(ctx, "alice", "gh"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get(ctx, "alice", "gh"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after Delete: %v", err)
	}
}
