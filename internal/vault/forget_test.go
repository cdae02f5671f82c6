package vault

import (
	"context"
	"errors"
	"testing"
)

// A process told that another deleted or replaced an entry (Forget by
// EntryID, ForgetAll) reads it again at once instead of after readTTL;
// other entries stay cached. Two vaults on one store with one key agree
// on EntryID, which names neither the person nor the server.
func TestForget(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	c := newClock()
	a, b := newVault(t, st, c, k1), newVault(t, st, c, k1)
	for _, e := range []Entry{oauthEntry("alice", "github"), oauthEntry("bob", "github")} {
		if err := a.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Get(ctx, e.Person, e.Server); err != nil { // cached in b
			t.Fatal(err)
		}
	}
	id := a.EntryID("alice", "github")
	if id != b.EntryID("alice", "github") || id == a.EntryID("bob", "github") || len(id) != 64 {
		t.Fatalf("entry ids disagree or collide: %s", id)
	}
	for _, p := range []string{"alice", "bob"} {
		if err := a.Delete(ctx, p, "github"); err != nil {
			t.Fatal(err)
		}
	}
	b.Forget(id)
	if _, err := b.Get(ctx, "alice", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("alice's entry after Forget: %v, want ErrNotFound", err)
	}
	if _, err := b.Get(ctx, "bob", "github"); err != nil {
		t.Errorf("bob's entry is not forgotten yet, so still served from the cache: %v", err)
	}
	b.ForgetAll()
	if _, err := b.Get(ctx, "bob", "github"); !errors.Is(err, ErrNotFound) {
		t.Errorf("bob's entry after ForgetAll: %v, want ErrNotFound", err)
	}
}
