package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// getKeyView reads a key through GET /admin/v1/keys/{alias}.
func (r *rig) getKeyView(t *testing.T, alias string) KeyView {
	t.Helper()
	code, body := r.do(t, "GET", "/admin/v1/keys/"+alias, master, "")
	var v KeyView
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil {
		t.Fatalf("GET key %s: %d %s", alias, code, body)
	}
	return v
}

func (r *rig) patchKey(t *testing.T, alias, body string) string {
	t.Helper()
	code, out := r.do(t, "PATCH", "/admin/v1/keys/"+alias, master, body)
	if code != http.StatusOK {
		t.Fatalf("PATCH %s %s: %d %s", alias, body, code, out)
	}
	return out
}

// toolsList is the status of a tools/list made with secret.
func (r *rig) toolsList(t *testing.T, secret string) (int, string) {
	t.Helper()
	return r.do(t, "POST", "/mcp", secret, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
}

// PATCH "expires": null removes a key's expiry; an absent "expires"
// leaves it. (A pointer field read null as absent, so an expiry once set
// could only be moved, and the console could not remove it.)
func TestKeyExpiryCanBeCleared(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	soon := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	secret := r.createKey(t, `{"alias":"temp","servers":["calc"],"expires":"`+soon.Format(time.RFC3339)+`"}`)
	if got := r.getKeyView(t, "temp").Expires; got != soon.Format(time.RFC3339) {
		t.Fatalf("expires after create = %q, want %s", got, soon.Format(time.RFC3339))
	}

	// Absent: unchanged.
	r.patchKey(t, "temp", `{"user":"alice"}`)
	if v := r.getKeyView(t, "temp"); v.Expires != soon.Format(time.RFC3339) || v.User != "alice" {
		t.Errorf("after a PATCH without expires: expires %q user %q, want %s alice", v.Expires, v.User, soon.Format(time.RFC3339))
	}

	// A past expiry shuts the key out at once.
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	r.patchKey(t, "temp", `{"expires":"`+past+`"}`)
	if code, body := r.toolsList(t, secret); code != http.StatusUnauthorized {
		t.Fatalf("tools/list with an expired key: %d %s", code, body)
	}

	// null: no expiry; the key works again, and the store holds no expiry.
	out := r.patchKey(t, "temp", `{"expires":null}`)
	if strings.Contains(out, `"expires"`) {
		t.Errorf("PATCH expires null answered %s, want no expires", out)
	}
	if got := r.getKeyView(t, "temp").Expires; got != "" {
		t.Errorf("expires after null = %q, want none", got)
	}
	k, err := r.store.GetKeyByAlias(ctx, "temp")
	if err != nil || !k.ExpiresAt.IsZero() {
		t.Errorf("stored key: ExpiresAt %v, err %v; want zero (never)", k.ExpiresAt, err)
	}
	if code, body := r.toolsList(t, secret); code != http.StatusOK || !strings.Contains(body, "calc__add") {
		t.Errorf("tools/list after the expiry was removed: %d %s", code, body)
	}

	// And a key without expiry takes one again.
	r.patchKey(t, "temp", `{"expires":"`+soon.Format(time.RFC3339)+`"}`)
	if got := r.getKeyView(t, "temp").Expires; got != soon.Format(time.RFC3339) {
		t.Errorf("expires set again = %q", got)
	}

	// The audit names the field changed, never its value.
	_, body := r.do(t, "GET", "/admin/v1/audit/events", master, "")
	if !strings.Contains(body, `"fields":["expires"]`) || strings.Contains(body, past) {
		t.Errorf("audit events: %s", body)
	}
}

// null clears a key's networks, tool allow and deny lists, toolsets and
// access groups as an empty list does; absent leaves them.
func TestKeyListsClearedByNull(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	secret := r.createKey(t, `{"alias":"narrow","allowed_cidrs":["10.0.0.0/8"],"tools":{"calc":["add"]},"deny_tools":{"notes":["write"]},`+
		`"toolsets":["support"],"access_groups":["readonly"]}`)
	full := func(v KeyView) bool {
		return slices.Equal(v.AllowedCIDRs, []string{"10.0.0.0/8"}) && slices.Equal(v.Tools["calc"], []string{"add"}) &&
			slices.Equal(v.DenyTools["notes"], []string{"write"}) && slices.Equal(v.Toolsets, []string{"support"}) &&
			slices.Equal(v.AccessGroups, []string{"readonly"})
	}
	if v := r.getKeyView(t, "narrow"); !full(v) {
		t.Fatalf("created: %+v", v)
	}
	// The test client is 127.0.0.1: outside the key's network.
	if code, body := r.toolsList(t, secret); code != http.StatusForbidden {
		t.Fatalf("tools/list from outside the key's network: %d %s", code, body)
	}

	r.patchKey(t, "narrow", `{"rate_limit_rpm":50}`)
	if v := r.getKeyView(t, "narrow"); !full(v) || v.RateLimitRPM != 50 {
		t.Errorf("a PATCH without the lists changed them: %+v", v)
	}

	r.patchKey(t, "narrow", `{"allowed_cidrs":null,"tools":null,"deny_tools":null,"toolsets":null,"access_groups":null}`)
	v := r.getKeyView(t, "narrow")
	if len(v.AllowedCIDRs)+len(v.Tools)+len(v.DenyTools)+len(v.Toolsets)+len(v.AccessGroups) != 0 || v.RateLimitRPM != 50 {
		t.Errorf("after null: %+v, want no lists and rate 50", v)
	}
	k, err := r.store.GetKeyByAlias(ctx, "narrow")
	if err != nil || len(k.AllowedCIDRs)+len(k.Tools)+len(k.DenyTools)+len(k.Toolsets)+len(k.AccessGroups) != 0 {
		t.Errorf("stored: %+v %v", k, err)
	}
	// Any network now, every tool of every server.
	code, body := r.toolsList(t, secret)
	if code != http.StatusOK || !strings.Contains(body, "calc__sub") || !strings.Contains(body, "notes__write") {
		t.Errorf("tools/list after the lists were cleared: %d %s", code, body)
	}

	// The lists take values again; a grant still refuses fields it has not.
	r.patchKey(t, "narrow", `{"allowed_cidrs":["127.0.0.1"]}`)
	if got := r.getKeyView(t, "narrow").AllowedCIDRs; !slices.Equal(got, []string{"127.0.0.1/32"}) {
		t.Errorf("allowed_cidrs set again = %v", got)
	}
	if code, body := r.do(t, "PUT", "/admin/v1/grants/team/x", master, `{"expires":null}`); code != http.StatusBadRequest {
		t.Errorf("a grant with expires null: %d %s", code, body)
	}
}

// A key's cleared expiry and lists survive the SQLite store being closed
// and opened again: written as "never" and "none", not left as they were.
func TestKeyClearedFieldsRoundTripSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	k := store.Key{Alias: "rt", KeyHash: store.HashKey("mcpg_round_trip_secret"), KeyPrefix: "mcpg_rou", Source: store.SourceAPI,
		ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond), AllowedCIDRs: []string{"10.0.0.0/8"},
		Tools: map[string][]string{"calc": {"add"}}, DenyTools: map[string][]string{"calc": {"sub"}}}
	if _, err := st.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetKeyByAlias(ctx, "rt")
	if err != nil || got.ExpiresAt.IsZero() || len(got.AllowedCIDRs) != 1 {
		t.Fatalf("created: %+v %v", got, err)
	}
	// What apply makes of {"expires":null,"allowed_cidrs":null,"tools":null,"deny_tools":null}.
	var in KeyAttributes
	if err := json.Unmarshal([]byte(`{"expires":null,"allowed_cidrs":null,"tools":null,"deny_tools":null}`), &in); err != nil {
		t.Fatal(err)
	}
	api := &API{o: Options{Servers: func() []string { return []string{"calc"} }}}
	if err := api.apply(&got, &in); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateKey(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = sqlite.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	back, err := st.GetKeyByAlias(ctx, "rt")
	if err != nil {
		t.Fatal(err)
	}
	if !back.ExpiresAt.IsZero() || len(back.AllowedCIDRs) != 0 || len(back.Tools) != 0 || len(back.DenyTools) != 0 {
		t.Errorf("after reopening: ExpiresAt %v, AllowedCIDRs %v, Tools %v, DenyTools %v; want all cleared",
			back.ExpiresAt, back.AllowedCIDRs, back.Tools, back.DenyTools)
	}
}

// Clearable tells absent, null and a value apart, and writes them back.
func TestClearableJSON(t *testing.T) {
	for _, tc := range []struct {
		in        string
		set, null bool
		out       string
	}{
		{`{}`, false, false, `{}`},
		{`{"expires":null}`, true, true, `{"expires":null}`},
		{`{"expires":"2026-12-31T23:59:59Z"}`, true, false, `{"expires":"2026-12-31T23:59:59Z"}`},
	} {
		var in KeyAttributes
		if err := json.Unmarshal([]byte(tc.in), &in); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if in.Expires.Set != tc.set || in.Expires.Null != tc.null {
			t.Errorf("%s: Set %v Null %v, want %v %v", tc.in, in.Expires.Set, in.Expires.Null, tc.set, tc.null)
		}
		b, err := json.Marshal(in)
		if err != nil || string(b) != tc.out {
			t.Errorf("%s marshalled back to %s (%v), want %s", tc.in, b, err, tc.out)
		}
	}
	var in KeyAttributes
	if err := json.Unmarshal([]byte(`{"expires":"tomorrow"}`), &in); err == nil {
		t.Error(`"tomorrow" parsed as an expiry`)
	}
}
