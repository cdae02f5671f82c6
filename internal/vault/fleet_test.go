package vault

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

// Two replicas (two vaults on one store) refreshing one person's entry at
// once spend its refresh token once: the second waits for the first's
// lease and then finds the entry refreshed.
func TestRefreshSingleFlightAcrossReplicas(t *testing.T) {
	for _, shared := range []bool{true, false} {
		name := "leased"
		if !shared {
			name = "without a fleet lock"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t, t.TempDir())
			defer st.Close()
			c := newClock()
			a, b := newVault(t, st, c, k1), newVault(t, st, c, k1)
			if shared {
				leases := state.NewMemory(state.MemoryOptions{})
				defer leases.Close()
				a.ShareRefreshes(leases)
				b.ShareRefreshes(leases)
			}
			orig := oauthEntry("alice", "github")
			if err := a.Put(ctx, orig); err != nil {
				t.Fatal(err)
			}
			var spent atomic.Int32
			fn := func(ctx context.Context, e Entry) (Entry, error) {
				if !e.Expiry.Equal(orig.Expiry) {
					return e, nil // another replica refreshed it meanwhile
				}
				spent.Add(1)
				time.Sleep(150 * time.Millisecond) // the token endpoint
				e.AccessToken = "gho_refreshed"
				e.Expiry = e.Expiry.Add(time.Hour)
				return e, nil
			}
			var wg sync.WaitGroup
			got := make([]Entry, 2)
			errs := make([]error, 2)
			for i, v := range []*Vault{a, b} {
				wg.Go(func() { got[i], errs[i] = v.Refresh(ctx, "alice", "github", fn) })
			}
			wg.Wait()
			for i := range got {
				if errs[i] != nil || got[i].AccessToken != "gho_refreshed" {
					t.Errorf("replica %d: %+v, %v", i, got[i], errs[i])
				}
			}
			want := int32(1)
			if !shared {
				want = 2 // what the lease prevents
			}
			if n := spent.Load(); n != want {
				t.Errorf("the refresh token was spent %d times, want %d", n, want)
			}
		})
	}
}

type brokenLeases struct{}

func (brokenLeases) AcquireLease(context.Context, string, string, time.Duration) (bool, error) {
	return false, &state.UnavailableError{Op: "acquire lease", Err: errors.New("connection refused")}
}
func (brokenLeases) ReleaseLease(context.Context, string, string) error { return nil }

// With the lease service down a refresh still runs (unleased) instead of
// failing the person's call.
func TestRefreshWithoutReachableLeases(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, newClock(), k1)
	v.ShareRefreshes(brokenLeases{})
	if err := v.Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	e, err := v.Refresh(ctx, "alice", "github", func(_ context.Context, e Entry) (Entry, error) {
		e.AccessToken = "gho_new"
		return e, nil
	})
	if err != nil || e.AccessToken != "gho_new" {
		t.Fatalf("refresh with the lease service down: %+v, %v", e, err)
	}
}

// OnChange hears every write and delete, whoever makes it: Put, Refresh
// and Delete each name the entry by its EntryID, never its person, and
// only Delete says deleted.
func TestOnChange(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	defer st.Close()
	v := newVault(t, st, newClock(), k1)
	var got []string
	var deleted []bool
	v.OnChange(func(_ context.Context, id string, d bool) { got, deleted = append(got, id), append(deleted, d) })
	if err := v.Put(ctx, oauthEntry("alice", "github")); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Refresh(ctx, "alice", "github", func(_ context.Context, e Entry) (Entry, error) {
		e.AccessToken = "gho_new"
		return e, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, "alice", "github"); err != nil {
		t.Fatal(err)
	}
	id := v.EntryID("alice", "github")
	if len(got) != 3 || got[0] != id || got[1] != id || got[2] != id {
		t.Errorf("changes %v, want %s three times (put, refresh, delete)", got, id)
	}
	if !slices.Equal(deleted, []bool{false, false, true}) {
		t.Errorf("deleted %v, want false, false, true (put, refresh, delete)", deleted)
	}
	for _, g := range got {
		if strings.Contains(g, "alice") {
			t.Errorf("a change names the person: %q", g)
		}
	}
}
