package vault

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// A registration is sealed like an entry, never listed or reachable as a
// person's entry, and rotated with the others (it guards the reserved
// person and Rotate's rewriting of what it does not understand).
func TestRegistration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	defer st.Close()
	v := newVault(t, st, newClock(), k1)
	const secret = "client-secret-7c1d9e"
	doc := []byte(`{"client_id":"abc","client_secret":"` + secret + `"}`)

	if _, err := v.GetRegistration(ctx, "up"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("before put: %v", err)
	}
	if err := v.PutRegistration(ctx, "up", doc); err != nil {
		t.Fatal(err)
	}
	if err := v.Put(ctx, oauthEntry("alice", "up")); err != nil {
		t.Fatal(err)
	}
	if got, err := v.GetRegistration(ctx, "up"); err != nil || !bytes.Equal(got, doc) {
		t.Fatalf("get: %s, %v", got, err)
	}
	if m, err := v.List(ctx, Filter{}); err != nil || len(m) != 1 || m[0].Person != "alice" {
		t.Errorf("list shows %+v, %v; want alice's entry only", m, err)
	}
	if m, err := v.List(ctx, Filter{Server: "up"}); err != nil || len(m) != 1 {
		t.Errorf("list by server: %+v, %v", m, err)
	}
	// No public call reaches it as a person's entry.
	if _, err := v.Get(ctx, registrationPerson, "up"); !errors.Is(err, ErrInvalid) {
		t.Errorf("get as the reserved person: %v", err)
	}
	if err := v.Delete(ctx, registrationPerson, "up"); !errors.Is(err, ErrInvalid) {
		t.Errorf("delete as the reserved person: %v", err)
	}
	if err := v.Put(ctx, Entry{Person: registrationPerson, Server: "up", Kind: KindStatic, AccessToken: "x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("put as the reserved person: %v", err)
	}
	if _, err := v.List(ctx, Filter{Person: registrationPerson, Servers: []string{"up"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("list by name as the reserved person: %v", err)
	}
	st.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		matches, _ := filepath.Glob(filepath.Join(dir, "*.db"+suffix))
		for _, p := range matches {
			b, _ := os.ReadFile(p)
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the client secret in clear", p)
			}
		}
	}
	st = openStore(t, dir)
	defer st.Close()

	// Rotation re-seals it under the new key, which alone then reads it.
	both := newVault(t, st, nil, k2, k1)
	if n, err := both.Rotate(ctx); err != nil || n != 2 {
		t.Fatalf("rotate: %d, %v", n, err)
	}
	objs, _ := st.ListObjects(ctx, store.KindVault)
	for _, o := range objs {
		if r, _ := decodeRecord(o.Doc); r.KID != "k2" {
			t.Errorf("%s still under %s", o.Name, r.KID)
		}
	}
	only := newVault(t, st, nil, k2)
	if got, err := only.GetRegistration(ctx, "up"); err != nil || !bytes.Equal(got, doc) {
		t.Errorf("after rotate: %s, %v", got, err)
	}
	if err := only.DeleteRegistration(ctx, "up"); err != nil {
		t.Fatal(err)
	}
	if _, err := only.GetRegistration(ctx, "up"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
	if err := only.DeleteRegistration(ctx, "up"); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete again: %v", err)
	}
}

// Listing a person's entries by server name opens only those entries: a
// record that cannot be opened elsewhere does not fail it (guards the
// by-name path of List, which /me listings use).
func TestListByName(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, nil, k1)
	for _, e := range []Entry{oauthEntry("alice", "github"), oauthEntry("alice", "linear"), oauthEntry("bob", "github")} {
		if err := v.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// An unreadable record of someone else's.
	if _, err := st.PutObject(ctx, store.KindVault, "garbage", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.List(ctx, Filter{Person: "alice"}); err == nil {
		t.Error("a full listing should fail on the unreadable record")
	}
	m, err := v.List(ctx, Filter{Person: "alice", Servers: []string{"linear", "github", "nope", "github"}})
	if err != nil || len(m) != 2 || m[0].Server != "github" || m[1].Server != "linear" || m[0].Person != "alice" || m[0].KeyID != "k1" || !m[0].HasRefreshToken {
		t.Errorf("by name: %+v, %v", m, err)
	}
	if m, err := v.List(ctx, Filter{Person: "alice", Server: "linear", Servers: []string{"linear", "github"}}); err != nil || len(m) != 1 {
		t.Errorf("by name and server: %+v, %v", m, err)
	}
	if m, err := v.List(ctx, Filter{Person: "carol", Servers: []string{"github"}}); err != nil || len(m) != 0 {
		t.Errorf("carol: %+v, %v", m, err)
	}
}
