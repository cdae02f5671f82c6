package fleet

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Admin calls the admin API of replica r with the master key and decodes
// the JSON reply into out (nil: ignored); it returns the status. For
// scenarios that change the fleet on one replica and look on another (a
// key created on A used on B; a revocation on A refused on B).
func (r *Replica) Admin(t testing.TB, method, path, body string, out any) int {
	t.Helper()
	code, _ := r.AdminH(t, method, path, body, out)
	return code
}

// AdminH is Admin with the answer's header.
func (r *Replica) AdminH(t testing.TB, method, path, body string, out any) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, r.URL+path, strings.NewReader(body))
	req.Header.Set("X-Mcpgate-Api-Key", masterKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("admin %s %s on %s: %v", method, path, r.Name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("admin %s %s on %s: %d %q: %v", method, path, r.Name, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, resp.Header
}

// testRuntimeKey: a key created through the admin API on replica a is in
// PostgreSQL, so b and c accept it at once (SPEC S15: keys in Postgres).
func testRuntimeKey(t *testing.T, f *Fleet) {
	var created struct{ Key string }
	if code := f.Replicas[0].Admin(t, http.MethodPost, "/admin/v1/keys", `{"alias":"runtime","servers":["notes"]}`, &created); code != http.StatusCreated || created.Key == "" {
		t.Fatalf("create a key on a: %d %+v", code, created)
	}
	for _, r := range f.Replicas[1:] {
		c := statelessClient(http.DefaultClient, r.URL+"/mcp", created.Key)
		rep, err := c.Request(t.Context(), "tools/list", nil)
		if err != nil || !rep.OK() || !strings.Contains(rep.Body, "notes__get_note") {
			t.Errorf("the key created on a, on %s: %v %v", r.Name, rep, err)
		}
	}
}
