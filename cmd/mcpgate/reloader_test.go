package main

import (
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/config"
)

// TestReloadClassifiesEveryField: each config field is either applied by
// a reload or restart-only, never both, never neither.
func TestReloadClassifiesEveryField(t *testing.T) {
	for _, tc := range []struct {
		typ             reflect.Type
		reload, restart []string
	}{
		{reflect.TypeFor[config.Config](), reloadTop, restartTop},
		{reflect.TypeFor[config.CallerAuth](), reloadAuth, restartAuth},
		{reflect.TypeFor[config.Limits](), reloadLimits, restartLimits},
		{reflect.TypeFor[config.Telemetry](), reloadTelemetry, restartTelemetry},
	} {
		for i := range tc.typ.NumField() {
			name := configKey(tc.typ.Field(i))
			if name == "" {
				continue
			}
			in, out := slices.Contains(tc.reload, name), slices.Contains(tc.restart, name)
			if in == out {
				t.Errorf("%s.%s: applied by a reload %v, restart-only %v: decide which (cmd/mcpgate/reloader.go)", tc.typ.Name(), name, in, out)
			}
		}
	}
}

// TestKeepStartOnly: a restart-only field keeps its running value and is
// named; the others are left to apply.
func TestKeepStartOnly(t *testing.T) {
	cur := &config.Config{Listen: "127.0.0.1:4000", DataDir: "data", MaxBodyBytes: 1,
		Auth:   &config.CallerAuth{MasterKey: "old-master-key-0123456789", Keys: []config.KeyConfig{{Alias: "a", Key: "k"}}},
		Limits: config.Limits{MaxBatch: 5, ReadHeaderTimeout: 1}}
	next := &config.Config{Listen: "0.0.0.0:4000", DataDir: "data", MaxBodyBytes: 2,
		Auth:   &config.CallerAuth{MasterKey: "new-master-key-0123456789", Keys: []config.KeyConfig{{Alias: "b", Key: "k2"}}},
		Limits: config.Limits{MaxBatch: 6, ReadHeaderTimeout: 2}}
	got := keepStartOnly(cur, next)
	if diff := cmp.Diff(got, []string{"listen", "limits.read_header_timeout", "auth.master_key"}); diff != "" {
		t.Errorf("restart required (-got +want):\n%s", diff)
	}
	if next.Listen != cur.Listen || next.Auth.MasterKey != cur.Auth.MasterKey || next.Limits.ReadHeaderTimeout != 1 {
		t.Errorf("restart-only fields not kept: %+v", next)
	}
	if next.MaxBodyBytes != 2 || next.Limits.MaxBatch != 6 || next.Auth.Keys[0].Alias != "b" {
		t.Errorf("reloadable fields not applied: %+v", next)
	}
	if diff := cmp.Diff(changedSections(cur, next), []string{"max_body_bytes", "limits"}); diff != "" {
		t.Errorf("sections (-got +want):\n%s", diff)
	}

	// Turning auth on is a restart: the whole auth section stays.
	open := &config.Config{}
	keyed := &config.Config{Auth: &config.CallerAuth{Keys: []config.KeyConfig{{Alias: "a", Key: "k"}}}}
	if got := keepStartOnly(open, keyed); !slices.Equal(got, []string{"auth"}) || keyed.Auth != nil {
		t.Errorf("auth turned on: %v, auth %+v; want restart required and none applied", got, keyed.Auth)
	}
}
