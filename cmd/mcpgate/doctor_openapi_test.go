package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctor checks an openapi server like any other: the document loads
// (a spec beside the config file), its operations are the tools; a
// missing document fails naming the cause, and no secret is shown.
func TestDoctorOpenAPI(t *testing.T) {
	dir := t.TempDir()
	spec, err := os.ReadFile(filepath.Join("..", "..", "internal", "openapi", "testdata", "petstore3.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "petstore.yaml", string(spec))
	cfg := writeFile(t, dir, "mcpgate.yaml", `servers:
  pets:
    transport: openapi
    spec: petstore.yaml
    base_url: http://127.0.0.1:1/api/v3
    auth: {type: api_key, value: doctor-secret-123}
  gone:
    transport: openapi
    spec: absent.yaml
    base_url: http://127.0.0.1:1/api/v3
`)
	var out, errb bytes.Buffer
	code := run([]string{"doctor", "--config", cfg, "--json"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (one server fails); stdout %s stderr %s", code, out.String(), errb.String())
	}
	if strings.Contains(out.String()+errb.String(), "doctor-secret-123") {
		t.Error("the report shows the secret")
	}
	var rep struct {
		Servers []struct {
			Name, Transport, Verdict, Detail string
			Tools                            int
		}
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	got := map[string]string{}
	for _, s := range rep.Servers {
		got[s.Name] = s.Verdict + " " + s.Detail
		if s.Name == "pets" && (s.Verdict != "ok" || s.Tools != 19 || s.Transport != "openapi") {
			t.Errorf("pets: %+v", s)
		}
		if s.Name == "gone" && (s.Verdict != "fail" || !strings.Contains(s.Detail, "absent.yaml")) {
			t.Errorf("gone: %+v", s)
		}
	}
	if len(got) != 2 {
		t.Errorf("servers = %v", got)
	}
}
