package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// reloads records the reloads an API asked for.
type reloads struct {
	mu  sync.Mutex
	by  []string
	err error // returned by the next reload
}

func (r *reloads) reload(_ context.Context, by string) (*ReloadReport, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by = append(r.by, by)
	if r.err != nil {
		return nil, r.err
	}
	return &ReloadReport{Changed: true, By: by}, nil
}

func (r *reloads) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.by)
}

// TestReloadEndpoint: POST /reload answers the report, or 422 with the
// file's problems by field; in a fleet the other replicas reload their own
// file, named as asked by whom.
func TestReloadEndpoint(t *testing.T) {
	mem := memBus(t)
	var apis []*API
	var recs []*reloads
	for range 2 {
		st := openTestStore(t)
		rec := &reloads{}
		a := New(Options{Store: st, Bus: mem, Reload: rec.reload, Config: &config.Config{},
			Authenticate: func(r *http.Request) (*callers.Caller, *callers.Failure) {
				return &callers.Caller{Alias: r.Header.Get("X-Test-Admin"), Admin: r.Header.Get("X-Test-Admin") != ""}, nil
			}})
		a.Start()
		t.Cleanup(a.Close)
		apis, recs = append(apis, a), append(recs, rec)
	}
	waitFollowed(t, apis...)

	post := func(as string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, Prefix+"/reload", nil)
		r.Header.Set("X-Test-Admin", as)
		apis[0].ServeHTTP(w, r)
		return w
	}
	if w := post(""); w.Code != http.StatusForbidden {
		t.Fatalf("reload by a non-admin: %d, want 403", w.Code)
	}
	w := post("ann")
	var rep ReloadReport
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &rep) != nil || !rep.Changed || rep.By != "ann" {
		t.Fatalf("reload: %d %s", w.Code, w.Body)
	}
	within(t, "the other replica's reload", func() bool { return slices.Equal(recs[1].calls(), []string{"fleet:ann"}) })
	if diff := cmp.Diff(recs[0].calls(), []string{"ann"}); diff != "" {
		t.Errorf("the asked replica's reloads (-got +want):\n%s", diff)
	}

	// A bad file: 422, problems by field, and nothing announced.
	recs[0].err = NewInvalidConfigError(errors.Join(
		&config.FieldError{Path: "servers.d.url", Line: 4, Err: errors.New("required for transport http")},
		&config.FieldError{Path: "bogus", Line: 9, Err: errors.New("unknown field")}))
	w = post("bad")
	var body reloadBody
	if w.Code != http.StatusUnprocessableEntity || json.Unmarshal(w.Body.Bytes(), &body) != nil {
		t.Fatalf("bad file: %d %s", w.Code, w.Body)
	}
	want := []ConfigProblem{{Path: "servers.d.url", Line: 4, Message: "required for transport http"}, {Path: "bogus", Line: 9, Message: "unknown field"}}
	if diff := cmp.Diff(body.Problems, want); diff != "" {
		t.Errorf("problems (-got +want):\n%s", diff)
	}
	// A refused reload is not announced: the next the other replica
	// hears (the bus keeps order) is the following good one.
	recs[0].err = nil
	post("cid")
	within(t, "the second announced reload", func() bool { return len(recs[1].calls()) == 2 })
	if diff := cmp.Diff(recs[1].calls(), []string{"fleet:ann", "fleet:cid"}); diff != "" {
		t.Errorf("the other replica's reloads (-got +want):\n%s", diff)
	}
}

// TestRecordReload: a reload's audit record names who and what, never
// values; a refused one names the fields.
func TestRecordReload(t *testing.T) {
	st := openTestStore(t)
	a := New(Options{Store: st})
	ctx := context.Background()
	a.RecordReload(ctx, "SIGHUP", "/etc/mcpgate.yaml", &ReloadReport{Changed: true, Keys: KeyChanges{Removed: []string{"bob"}}, By: "SIGHUP"}, nil)
	a.RecordReload(ctx, "watch", "/etc/mcpgate.yaml", nil, NewInvalidConfigError(&config.FieldError{Path: "servers.x.url", Err: errors.New("bad")}))
	got, _, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d audit entries, want 2", len(got))
	}
	byAction := map[string]store.AuditEntry{}
	for _, e := range got {
		byAction[e.Action] = e
	}
	if e := byAction[ReloadAuditAction]; e.Actor != "SIGHUP" || e.Target != "/etc/mcpgate.yaml" || !json.Valid(e.Detail) || !containsAll(string(e.Detail), `"removed":["bob"]`) {
		t.Errorf("reload entry: %+v %s", e, e.Detail)
	}
	if e := byAction[ReloadFailedAuditAction]; e.Actor != "watch" || !containsAll(string(e.Detail), `"fields":"servers.x.url"`, `"problems":1`) {
		t.Errorf("refused reload entry: %+v %s", e, e.Detail)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func openTestStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
