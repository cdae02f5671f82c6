package admin

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/store"
)

// hostFileFields are the fields of a server that name a file on the
// gateway's host, each with a document naming %s there and the field
// that takes the content instead.
var hostFileFields = []struct{ field, doc, instead string }{
	{"tls.ca_file", `"tls":{"ca_file":%q}`, "tls.ca"},
	{"tls.cert_file", `"tls":{"cert_file":%q}`, "tls.cert"},
	{"tls.key_file", `"tls":{"key_file":%q}`, "tls.key"},
	{"auth.private_key_file", `"auth":{"type":"oauth2","token_url":"https://t.example/token","client_id":"a","client_auth":"private_key_jwt","private_key_file":%q}`, "auth.private_key"},
}

func hostFileError(server, field, instead string) string {
	return `{"error":"Bad Request","details":"servers.` + server + `.` + field + `: names a file on the gateway's host, which only the config file may do; give the content itself in servers.` + server + `.` + instead + `"}`
}

// TestRuntimeServerHostFiles (issue 22 §8): a server added or changed
// through the API names no file on the gateway's host. Each file field is
// refused by name with 400, the same answer for /etc/passwd, a file that
// exists and one that does not (nothing looks at it); a PATCH cannot add
// one to a stored server, which stays as it was.
func TestRuntimeServerHostFiles(t *testing.T) {
	r := newRig(t)
	existing := filepath.Join(t.TempDir(), "exists.pem")
	if err := os.WriteFile(existing, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	url := toolUpstream(t, "ping")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`","timeout":"5s"}`); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	before, err := r.store.GetObject(context.Background(), store.KindServer, "extra")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range hostFileFields {
		t.Run(f.field, func(t *testing.T) {
			for _, path := range []string{"/etc/passwd", existing, missing} {
				field := strings.Replace(f.doc, "%q", `"`+path+`"`, 1)
				code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"x","transport":"http","url":"https://h.example/mcp",`+field+`}`)
				if want := hostFileError("x", f.field, f.instead); code != http.StatusBadRequest || body != want+"\n" && body != want {
					t.Errorf("POST with %s: %d %s\nwant 400 %s", path, code, body, want)
				}
				code, body = r.do(t, "PATCH", "/admin/v1/servers/extra", master, `{`+field+`}`)
				if want := hostFileError("extra", f.field, f.instead); code != http.StatusBadRequest || body != want+"\n" && body != want {
					t.Errorf("PATCH with %s: %d %s\nwant 400 %s", path, code, body, want)
				}
			}
		})
	}
	if _, err := r.store.GetObject(context.Background(), store.KindServer, "x"); err == nil {
		t.Error("a refused server was stored")
	}
	after, err := r.store.GetObject(context.Background(), store.KindServer, "extra")
	if err != nil || string(after.Doc) != string(before.Doc) {
		t.Errorf("the patched server's stored document changed: %s -> %s (%v)", before.Doc, after.Doc, err)
	}
	if _, body := r.do(t, "POST", "/mcp/extra", master, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ping","arguments":{}}}`); !strings.Contains(body, "called ping") {
		t.Errorf("the server is no longer served as it was: %s", body)
	}
}

// TestStoredServerWithHostFile: a runtime server an older version stored
// with a host file is not served (the file is never read); the API can
// still remove it.
func TestStoredServerWithHostFile(t *testing.T) {
	rep := fleetRig(t, 1, sqliteStores(t), nil)[0]
	doc := `{"transport":"http","url":"https://h.example/mcp","tls":{"ca_file":"/etc/passwd"}}`
	if _, err := rep.store.PutObject(context.Background(), store.KindServer, "old", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if err := rep.api.SyncServers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, body := rep.do(t, "GET", "/admin/v1/servers", master, ""); strings.Contains(body, `"old"`) {
		t.Errorf("a stored server naming a host file is served: %s", body)
	}
	if code, body := rep.do(t, "DELETE", "/admin/v1/servers/old", master, ""); code != http.StatusNoContent {
		t.Errorf("remove: %d %s", code, body)
	}
	if _, err := rep.store.GetObject(context.Background(), store.KindServer, "old"); err == nil {
		t.Error("still stored after DELETE")
	}
}

// TestRuntimeServerPreviewMasked (issue 22 §9): the admin API's preview
// of a server (which the console shows) masks every static header value
// and the credential, whatever the header's name; the server list shows
// no value either.
func TestRuntimeServerPreviewMasked(t *testing.T) {
	r := newRig(t)
	url := toolUpstream(t, "ping")
	if code, body := r.do(t, "POST", "/admin/v1/servers", master, `{"name":"extra","transport":"http","url":"`+url+`",`+
		`"headers":{"X-Custom-Cred":"s3cret","X-Jwt-Assertion":"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJndyJ9.c2ln"},"auth":{"type":"bearer_token","value":"tok-abcdefghijklmnopqrst"}}`); code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	code, body := r.do(t, "GET", "/admin/v1/servers/extra/preview", master, "")
	if code != http.StatusOK {
		t.Fatalf("preview: %d %s", code, body)
	}
	for _, want := range []string{`"X-Custom-Cred":["****"]`, `"X-Jwt-Assertion":["****c2ln"]`, `"Authorization":["Bearer ****qrst"]`} {
		if !strings.Contains(body, want) {
			t.Errorf("preview lacks %s: %s", want, body)
		}
	}
	_, list := r.do(t, "GET", "/admin/v1/servers", master, "")
	for _, leak := range []string{"s3cret", "eyJhbGci", "tok-abcd"} {
		if strings.Contains(body, leak) || strings.Contains(list, leak) {
			t.Errorf("%q shown: preview %s, list %s", leak, body, list)
		}
	}
}
