package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/store"
)

var directoryTests = []test{
	{"Users", testUsers},
	{"Teams", testTeams},
}

var objectTests = []test{
	{"RoundTrip", testObjectRoundTrip},
	{"Invalid", testObjectInvalid},
	{"Kinds", testObjectKinds},
}

var sessionTests = []test{
	{"ExpireAndTouch", testTerminatedExpireAndTouch},
	{"Purge", testTerminatedPurge},
	{"OnlyHashes", testTerminatedOnlyHashes},
}

// party abstracts users and teams, which behave alike.
type party struct {
	upsert func(id, name string, created time.Time) (string, string, time.Time, error)
	get    func(id string) (string, string, time.Time, error)
	list   func() ([]string, error)
	del    func(id string) error
}

func testUsers(t *testing.T, s store.Store) {
	ctx := t.Context()
	testParty(t, party{
		upsert: func(id, name string, created time.Time) (string, string, time.Time, error) {
			u, err := s.UpsertUser(ctx, store.User{ID: id, Name: name, CreatedAt: created})
			return u.ID, u.Name, u.CreatedAt, err
		},
		get: func(id string) (string, string, time.Time, error) {
			u, err := s.GetUser(ctx, id)
			return u.ID, u.Name, u.CreatedAt, err
		},
		list: func() ([]string, error) {
			us, err := s.ListUsers(ctx)
			ids := []string{}
			for _, u := range us {
				ids = append(ids, u.ID+"="+u.Name)
			}
			return ids, err
		},
		del: func(id string) error { return s.DeleteUser(ctx, id) },
	})
}

func testTeams(t *testing.T, s store.Store) {
	ctx := t.Context()
	testParty(t, party{
		upsert: func(id, name string, created time.Time) (string, string, time.Time, error) {
			u, err := s.UpsertTeam(ctx, store.Team{ID: id, Name: name, CreatedAt: created})
			return u.ID, u.Name, u.CreatedAt, err
		},
		get: func(id string) (string, string, time.Time, error) {
			u, err := s.GetTeam(ctx, id)
			return u.ID, u.Name, u.CreatedAt, err
		},
		list: func() ([]string, error) {
			us, err := s.ListTeams(ctx)
			ids := []string{}
			for _, u := range us {
				ids = append(ids, u.ID+"="+u.Name)
			}
			return ids, err
		},
		del: func(id string) error { return s.DeleteTeam(ctx, id) },
	})
}

func testParty(t *testing.T, p party) {
	t.Helper()
	id, name, created, err := p.upsert("bob", "Bob", at(10))
	if err != nil {
		t.Fatal(err)
	}
	if id != "bob" || name != "Bob" || !created.Equal(at(10)) {
		t.Errorf("upsert returned %q %q %v", id, name, created)
	}
	// A rename keeps the creation time.
	if _, _, created, err = p.upsert("bob", "Robert", at(99)); err != nil {
		t.Fatal(err)
	}
	if !created.Equal(at(10)) {
		t.Errorf("CreatedAt after rename = %v, want %v", created, at(10))
	}
	if _, name, created, err = p.get("bob"); err != nil || name != "Robert" || !created.Equal(at(10)) {
		t.Errorf("get = %q %v %v, want Robert %v", name, created, err, at(10))
	}
	before := time.Now().Add(-time.Second)
	if _, _, created, err = p.upsert("alice", "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if created.Before(before) {
		t.Errorf("default CreatedAt = %v, want about now", created)
	}
	ids, err := p.list()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ids, []string{"alice=", "bob=Robert"}); diff != "" {
		t.Errorf("list (-got +want):\n%s", diff)
	}
	if err := p.del("bob"); err != nil {
		t.Fatal(err)
	}
	if err := p.del("bob"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: err = %v, want ErrNotFound", err)
	}
	if _, _, _, err := p.get("bob"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get after delete: err = %v, want ErrNotFound", err)
	}
	if _, _, _, err := p.upsert("", "nobody", time.Time{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty id: err = %v, want ErrInvalid", err)
	}
}

func testObjectRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	doc := json.RawMessage(`{"transport":"http","url":"https://mcp.example.com/mcp","big":12345678901234567890,"nested":{"x":[1,2]}}`)
	before := time.Now().Add(-time.Second)
	o, err := s.PutObject(ctx, store.KindServer, "github", doc)
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != store.KindServer || o.Name != "github" || string(o.Doc) != string(doc) || o.Version != 1 {
		t.Errorf("PutObject = %+v", o)
	}
	if o.CreatedAt.Before(before) || !o.UpdatedAt.Equal(o.CreatedAt) {
		t.Errorf("times = %v, %v; want now, equal", o.CreatedAt, o.UpdatedAt)
	}
	got, err := s.GetObject(ctx, store.KindServer, "github")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, o); diff != "" {
		t.Errorf("GetObject (-got +want):\n%s", diff)
	}

	doc2 := json.RawMessage(`{"transport":"stdio","command":"gh-mcp"}`)
	o2, err := s.PutObject(ctx, store.KindServer, "github", doc2)
	if err != nil {
		t.Fatal(err)
	}
	if o2.Version != 2 || string(o2.Doc) != string(doc2) || !o2.CreatedAt.Equal(o.CreatedAt) || o2.UpdatedAt.Before(o.UpdatedAt) {
		t.Errorf("second PutObject = %+v", o2)
	}

	// Same name, other kind: a separate object.
	if _, err := s.PutObject(ctx, store.KindToolset, "github", json.RawMessage(`{"tools":[]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutObject(ctx, store.KindServer, "atlassian", json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListObjects(ctx, store.KindServer)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range list {
		names = append(names, o.Kind+"/"+o.Name)
	}
	if diff := cmp.Diff(names, []string{"server/atlassian", "server/github"}); diff != "" {
		t.Errorf("ListObjects (-got +want):\n%s", diff)
	}

	if err := s.DeleteObject(ctx, store.KindServer, "github"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteObject(ctx, store.KindServer, "github"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetObject(ctx, store.KindServer, "github"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get after delete: err = %v, want ErrNotFound", err)
	}
	if _, err := s.GetObject(ctx, store.KindToolset, "github"); err != nil {
		t.Errorf("deleting the server removed the toolset: %v", err)
	}
	// A re-created object starts again at version 1.
	if o, err := s.PutObject(ctx, store.KindServer, "github", doc); err != nil || o.Version != 1 {
		t.Errorf("re-created object: version %d, err %v; want 1", o.Version, err)
	}
}

func testObjectInvalid(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, tt := range []struct {
		name, kind, obj string
		doc             json.RawMessage
	}{
		{"empty doc", store.KindServer, "a", nil},
		{"bad JSON", store.KindServer, "a", json.RawMessage(`{"a":`)},
		{"two values", store.KindServer, "a", json.RawMessage(`{} {}`)},
		{"unknown kind", "servers", "a", json.RawMessage(`{}`)},
		{"empty name", store.KindToolset, "", json.RawMessage(`{}`)},
	} {
		if _, err := s.PutObject(ctx, tt.kind, tt.obj, tt.doc); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tt.name, err)
		}
	}
	for _, kind := range []string{store.KindServer, store.KindToolset} {
		if list, err := s.ListObjects(ctx, kind); err != nil || len(list) != 0 {
			t.Errorf("ListObjects(%s) = %d objects, %v; want none", kind, len(list), err)
		}
	}
}

// testObjectKinds checks that every kind is its own collection: one name
// under each kind is a separate document.
func testObjectKinds(t *testing.T, s store.Store) {
	ctx := t.Context()
	kinds := []string{store.KindServer, store.KindToolset, store.KindOAuthKey, store.KindOAuthClient,
		store.KindOAuthFamily, store.KindOAuthRefresh, store.KindOAuthConsent}
	for i, kind := range kinds {
		if _, err := s.PutObject(ctx, kind, "same", json.RawMessage(`{"i":`+string(rune('0'+i))+`}`)); err != nil {
			t.Fatalf("PutObject(%s): %v", kind, err)
		}
	}
	for i, kind := range kinds {
		list, err := s.ListObjects(ctx, kind)
		if err != nil {
			t.Fatal(err)
		}
		want := `{"i":` + string(rune('0'+i)) + `}`
		if len(list) != 1 || string(list[0].Doc) != want {
			t.Errorf("ListObjects(%s) = %v, want one document %s", kind, list, want)
		}
	}
}

func testTerminatedExpireAndTouch(t *testing.T, s store.Store) {
	ctx := t.Context()
	h := store.HashSessionID("session-1")
	other := store.HashSessionID("session-2")
	is := func(hash string, now time.Time) bool {
		t.Helper()
		ok, err := s.IsTerminated(ctx, hash, now)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if is(h, at(0)) {
		t.Error("unknown id reported terminated")
	}
	if err := s.MarkTerminated(ctx, h, at(1000)); err != nil {
		t.Fatal(err)
	}
	if !is(h, at(0)) || !is(h, at(999)) {
		t.Error("terminated id not reported before its expiry")
	}
	if is(h, at(1000)) {
		t.Error("terminated id still reported at its expiry")
	}
	if is(other, at(0)) {
		t.Error("another id reported terminated")
	}

	if err := s.TouchTerminated(ctx, h, at(5000)); err != nil {
		t.Fatal(err)
	}
	if !is(h, at(4999)) {
		t.Error("touch did not extend the expiry")
	}
	if err := s.TouchTerminated(ctx, h, at(2000)); err != nil {
		t.Fatal(err)
	}
	if !is(h, at(4999)) {
		t.Error("an earlier touch shortened the expiry")
	}
	if err := s.TouchTerminated(ctx, other, at(5000)); err != nil {
		t.Fatal(err)
	}
	if is(other, at(0)) {
		t.Error("touching an unknown id made it terminated")
	}
	// Marking again sets the expiry outright.
	if err := s.MarkTerminated(ctx, h, at(3000)); err != nil {
		t.Fatal(err)
	}
	if is(h, at(3000)) {
		t.Error("MarkTerminated did not replace the expiry")
	}
}

func testTerminatedPurge(t *testing.T, s store.Store) {
	ctx := t.Context()
	for i, until := range []int{100, 200, 300} {
		if err := s.MarkTerminated(ctx, store.HashSessionID(string(rune('a'+i))), at(until)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PurgeTerminated(ctx, at(200))
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("PurgeTerminated removed %d, want 2", n)
	}
	// Purged ids are forgotten even for a clock that runs behind.
	for i, want := range []bool{false, false, true} {
		ok, err := s.IsTerminated(ctx, store.HashSessionID(string(rune('a'+i))), at(0))
		if err != nil || ok != want {
			t.Errorf("id %d after purge: terminated = %v, %v; want %v", i, ok, err, want)
		}
	}
	if n, err := s.PurgeTerminated(ctx, at(200)); err != nil || n != 0 {
		t.Errorf("second purge = %d, %v; want 0", n, err)
	}
}

// The store refuses what may be a raw session id, so a caller that forgets
// to hash fails loudly instead of persisting ids.
func testTerminatedOnlyHashes(t *testing.T, s store.Store) {
	ctx := t.Context()
	raw := "8b7c1f0e-raw-session-id"
	errs := map[string]error{"MarkTerminated": s.MarkTerminated(ctx, raw, at(1000)), "TouchTerminated": s.TouchTerminated(ctx, raw, at(1000))}
	_, errs["IsTerminated"] = s.IsTerminated(ctx, raw, at(0))
	for name, err := range errs {
		if !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s with a raw id: err = %v, want ErrInvalid", name, err)
		}
		if err != nil && strings.Contains(err.Error(), raw) {
			t.Errorf("%s error %q echoes the id", name, err)
		}
	}
}
