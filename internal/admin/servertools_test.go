package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// A server's tools as the upstream lists them, with its policy; a runtime
// server's policy is changed in place (the rest of its entry kept, the
// change served and stored); a config-file server's is read-only.
func TestServerTools(t *testing.T) {
	r := newRig(t)
	url := toolUpstream(t, "a", "b", "c")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s","auth":{"type":"bearer_token","value":"tok-123"},"tools":{"costs":{"*":0.5}}}`); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	type view struct {
		Source string
		Policy struct {
			Allow     []string
			Deny      []string
			Overrides map[string]struct{ Name, Description string }
		}
		Tools []struct {
			Name        string
			DisplayName string `json:"display_name"`
			Visible     bool
		}
	}
	get := func(server string) view {
		t.Helper()
		code, body := r.do(t, "GET", "/admin/v1/servers/"+server+"/tools", master, "")
		if code != 200 {
			t.Fatalf("GET tools of %s: %d %s", server, code, body)
		}
		var v view
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	visible := func(v view) string {
		var out []string
		for _, tl := range v.Tools {
			if tl.Visible {
				out = append(out, tl.Name+"="+tl.DisplayName)
			}
		}
		return strings.Join(out, ",")
	}
	// The config file's calc denies drop: listed, not visible, read-only.
	if v := get("calc"); v.Source != "config" || len(v.Tools) != 3 || visible(v) != "add=,sub=" || len(v.Policy.Deny) != 1 {
		t.Errorf("calc: %+v", v)
	}
	if code, _ := r.do(t, "PUT", "/admin/v1/servers/calc/tools", master, `{"deny":[]}`); code != http.StatusConflict {
		t.Errorf("changing a file server's tools: %d", code)
	}
	if v := get("extra"); v.Source != "api" || visible(v) != "a=,b=,c=" {
		t.Errorf("extra before: %+v", v)
	}
	code, body := r.do(t, "PUT", "/admin/v1/servers/extra/tools", master, `{"deny":["b"],"overrides":{"c":{"name":"see","description":"renamed"}}}`)
	if code != 200 {
		t.Fatalf("PUT tools: %d %s", code, body)
	}
	if v := get("extra"); visible(v) != "a=,c=see" || v.Policy.Overrides["c"].Name != "see" {
		t.Errorf("extra after: %+v", v)
	}
	// Served at once, stored with the rest of the entry (its credential
	// too), and audited.
	_, body = r.do(t, "POST", "/mcp", master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if !strings.Contains(body, `"extra__a"`) || !strings.Contains(body, `"extra__see"`) || strings.Contains(body, `"extra__b"`) || strings.Contains(body, `"extra__c"`) {
		t.Errorf("served catalog: %s", body)
	}
	if _, body := r.do(t, "POST", "/mcp/extra", master, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"see","arguments":{}}}`); !strings.Contains(body, "called c") {
		t.Errorf("a call by the display name: %s", body)
	}
	obj, err := r.store.GetObject(context.Background(), store.KindServer, "extra")
	if err != nil || !strings.Contains(string(obj.Doc), `"tok-123"`) || !strings.Contains(string(obj.Doc), `"see"`) || !strings.Contains(string(obj.Doc), `"costs":{"*":0.5}`) {
		t.Errorf("stored: %v %s", err, obj.Doc)
	}
	if _, body := r.do(t, "GET", "/admin/v1/audit/events?action=server.tools", master, ""); !strings.Contains(body, `"target":"extra"`) {
		t.Errorf("audit events: %s", body)
	}
	// A bad policy changes nothing and says which field.
	if code, body := r.do(t, "PUT", "/admin/v1/servers/extra/tools", master, `{"allow":5}`); code != http.StatusBadRequest || !strings.Contains(body, "servers.extra.tools.allow") {
		t.Errorf("bad policy: %d %s", code, body)
	}
	if v := get("extra"); visible(v) != "a=,c=see" {
		t.Errorf("after a bad policy: %+v", v)
	}
	if code, _ := r.do(t, "PUT", "/admin/v1/servers/nope/tools", master, `{}`); code != http.StatusNotFound {
		t.Errorf("unknown server: %d", code)
	}
}

// PATCH merges into a runtime server's stored entry (RFC 7396): the
// credential not sent stays, null removes a member, a bad result changes
// nothing; config-file servers are read-only.
func TestPatchServer(t *testing.T) {
	r := newRig(t)
	first, second := toolUpstream(t, "one"), toolUpstream(t, "two")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+first+`","timeout":"5s","session_mode":"per_call","auth":{"type":"bearer_token","value":"tok-keep"}}`); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	if code, body := r.do(t, "PATCH", "/admin/v1/servers/extra", master, `{"url":"`+second+`","session_mode":null}`); code != 200 {
		t.Fatalf("patch: %d %s", code, body)
	}
	if _, body := r.do(t, "POST", "/mcp", master, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); !strings.Contains(body, `"extra__two"`) || strings.Contains(body, `"extra__one"`) {
		t.Errorf("after the patch: %s", body)
	}
	obj, err := r.store.GetObject(context.Background(), store.KindServer, "extra")
	if err != nil || !strings.Contains(string(obj.Doc), "tok-keep") || strings.Contains(string(obj.Doc), "per_call") || !strings.Contains(string(obj.Doc), second) {
		t.Errorf("stored after the patch: %v %s", err, obj.Doc)
	}
	for _, c := range []struct {
		path, body string
		want       int
	}{
		{"/admin/v1/servers/extra", `{"url":"ftp://x"}`, 400},
		{"/admin/v1/servers/extra", `[1]`, 400},
		{"/admin/v1/servers/calc", `{"timeout":"3s"}`, 409},
		{"/admin/v1/servers/nope", `{"timeout":"3s"}`, 404},
	} {
		if code, body := r.do(t, "PATCH", c.path, master, c.body); code != c.want {
			t.Errorf("PATCH %s %s: %d %s, want %d", c.path, c.body, code, body, c.want)
		}
	}
	if _, body := r.do(t, "POST", "/mcp", master, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); !strings.Contains(body, `"extra__two"`) {
		t.Errorf("a refused patch changed the server: %s", body)
	}
}
