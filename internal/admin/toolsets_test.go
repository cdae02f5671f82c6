package admin

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// Runtime toolsets (SPEC S7): PUT creates or replaces one, validated like
// the config file's, served on /toolset/<name>/mcp at once and stored;
// the config file's are read-only; a server a toolset names cannot be
// removed from under it; DELETE removes it.
func TestRuntimeToolsets(t *testing.T) {
	r := newRig(t)
	list := func(route string) (int, string) {
		return r.do(t, "POST", route, master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	}
	if code, body := r.do(t, "PUT", "/admin/v1/toolsets/math", master, `{"servers":{"calc":["add"]}}`); code != 200 || !strings.Contains(body, `"source":"api"`) {
		t.Fatalf("put: %d %s", code, body)
	}
	if code, body := list("/toolset/math/mcp"); code != 200 || !strings.Contains(body, `add"`) || strings.Contains(body, `sub"`) {
		t.Errorf("toolset route: %d %s", code, body)
	}
	if obj, err := r.store.GetObject(context.Background(), store.KindToolset, "math"); err != nil || string(obj.Doc) != `{"servers":{"calc":["add"]}}` {
		t.Errorf("stored: %v %s", err, obj.Doc)
	}
	if code, body := r.do(t, "PUT", "/admin/v1/toolsets/math", master, `{"servers":{"calc":["sub"]}}`); code != 200 {
		t.Fatalf("replace: %d %s", code, body)
	}
	if _, body := list("/toolset/math/mcp"); !strings.Contains(body, `sub"`) || strings.Contains(body, `add"`) {
		t.Errorf("replaced toolset route: %s", body)
	}
	_, body := r.do(t, "GET", "/admin/v1/toolsets", master, "")
	if !strings.Contains(body, `{"name":"math","servers":{"calc":["sub"]},"source":"api"}`) || !strings.Contains(body, `"name":"support","servers":{"notes":["read"]},"source":"config"`) {
		t.Errorf("list: %s", body)
	}
	// A key may now be given the toolset.
	if code, body := r.do(t, "POST", "/admin/v1/keys", master, `{"alias":"m","toolsets":["math"]}`); code != http.StatusCreated {
		t.Errorf("key with the runtime toolset: %d %s", code, body)
	}
	for _, tc := range []struct{ path, body, want string }{
		{"/admin/v1/toolsets/x", `{"servers":{"nope":["a"]}}`, `toolsets.x.servers.nope: unknown server`},
		{"/admin/v1/toolsets/x", `{"servers":{"calc":[]}}`, `must list at least one tool`},
		{"/admin/v1/toolsets/x", `{"servers":{}}`, `servers: must name at least one server`},
		{"/admin/v1/toolsets/x", `{"tools":{}}`, `unknown field \"tools\"`},
		{"/admin/v1/toolsets/Bad!", `{"servers":{"calc":["add"]}}`, `name: must match`},
	} {
		code, body := r.do(t, "PUT", tc.path, master, tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("PUT %s %s: %d %s, want %s", tc.path, tc.body, code, body, tc.want)
		}
	}
	if _, err := r.store.GetObject(context.Background(), store.KindToolset, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a refused toolset was stored: %v", err)
	}
	if code, _ := r.do(t, "PUT", "/admin/v1/toolsets/support", master, `{"servers":{"calc":["add"]}}`); code != http.StatusConflict {
		t.Errorf("replacing a file toolset: %d", code)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/toolsets/support", master, ""); code != http.StatusConflict {
		t.Errorf("removing a file toolset: %d", code)
	}

	// A runtime server in a runtime toolset stays until the toolset goes.
	url := toolUpstream(t, "ping")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add server: %d %s", code, body)
	}
	if code, body := r.do(t, "PUT", "/admin/v1/toolsets/pings", master, `{"servers":{"extra":["ping"]}}`); code != 200 {
		t.Fatalf("put pings: %d %s", code, body)
	}
	if code, body := r.do(t, "DELETE", "/admin/v1/servers/extra", master, ""); code != http.StatusConflict || !strings.Contains(body, `in toolset \"pings\"`) {
		t.Errorf("removing a server a toolset names: %d %s", code, body)
	}
	for _, name := range []string{"pings", "math"} {
		if code, _ := r.do(t, "DELETE", "/admin/v1/toolsets/"+name, master, ""); code != http.StatusNoContent {
			t.Errorf("delete %s: %d", name, code)
		}
	}
	if code, _ := list("/toolset/math/mcp"); code != http.StatusNotFound {
		t.Errorf("deleted toolset's route: %d", code)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/toolsets/math", master, ""); code != http.StatusNotFound {
		t.Errorf("second delete: %d", code)
	}
	if code, _ := r.do(t, "DELETE", "/admin/v1/servers/extra", master, ""); code != http.StatusNoContent {
		t.Errorf("remove the server once no toolset names it: %d", code)
	}
}
