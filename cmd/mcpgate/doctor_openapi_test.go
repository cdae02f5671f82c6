package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
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

// The admin API's server test reaches an openapi server like the doctor.
func TestServerTestEndpointOpenAPI(t *testing.T) {
	clearAdminEnv(t)
	const master = "master-key-0123456789abcdef"
	dir := t.TempDir()
	spec, _ := filepath.Abs(filepath.Join("..", "..", "internal", "openapi", "testdata", "petstore31.yaml"))
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: dir, ToolNameSeparator: "__",
		Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			"pets": {Name: "pets", Transport: config.TransportOpenAPI, Spec: spec, BaseURL: "http://127.0.0.1:1/api/v31", Timeout: 2 * time.Second},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()
	code, body := rest(t, "POST", hs.URL+"/admin/v1/servers/pets/test", master, "")
	var ch serverCheck
	if code != 200 || json.Unmarshal([]byte(body), &ch) != nil || ch.Verdict != verdictOK || ch.Tools == nil || *ch.Tools != 3 {
		t.Fatalf("test of an openapi server: %d %s", code, body)
	}
}
