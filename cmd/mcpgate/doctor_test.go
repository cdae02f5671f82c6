package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/upstream"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// newSDKUpstream is a streamable HTTP MCP server of the official go-sdk
// (sdkHandler), over TLS with tlsOn.
func newSDKUpstream(t testing.TB, token string, tlsOn bool) *httptest.Server {
	t.Helper()
	var ts *httptest.Server
	if tlsOn {
		ts = httptest.NewTLSServer(sdkHandler(token))
	} else {
		ts = httptest.NewServer(sdkHandler(token))
	}
	t.Cleanup(ts.Close)
	return ts
}

// sdkHandler serves a go-sdk MCP server with two tools; with token != ""
// it answers 401 unless the request carries Authorization: Bearer token.
func sdkHandler(token string) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sdk-doctor", Version: "2.1.0"}, nil)
	for _, name := range []string{"alpha", "beta"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: "does " + name},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
			})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer realm="doctor"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// doctor reaches every kind of upstream for real: the notes stdio server
// (ok), a go-sdk server refusing the configured token (auth fail), a
// go-sdk server over https trusted through the server's tls.ca_file
// (ok, with its certificate's expiry), a stdio command that does not
// exist (fail) and a user_api_key server (warn, not checked). It exits 1,
// and neither the table nor --json shows a configured secret.
func TestDoctorServers(t *testing.T) {
	_, notes := buildBinary(t)
	dir := t.TempDir()
	const (
		wrongToken = "wrong-Tok3n-Zq9xv"
		rightToken = "right-Tok3n-Kp4wm"
		envSecret  = "env-Secr3t-Hh7"
		urlSecret  = "url-Secr3t-Qm2"
	)
	locked := newSDKUpstream(t, rightToken, false)
	secure := newSDKUpstream(t, "", true)
	ca := writeFile(t, dir, "ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})))
	cfg := writeFile(t, dir, "doctor.yaml", fmt.Sprintf(`servers:
  notes:
    transport: stdio
    command: %s
    env: {NOTES_TOKEN: %s}
  locked:
    transport: http
    url: %s
    auth: {type: bearer_token, value: %s}
  secure:
    transport: http
    url: %s
    tls: {ca_file: %s}
  ghost:
    transport: stdio
    command: %s
  mine:
    transport: http
    url: %s
    auth: {type: user_api_key}
  refused:
    transport: sse
    url: http://user:%s@127.0.0.1:1/sse?key=%s
    headers: {X-Extra: %s}
vault:
  keys:
    - {id: k1, key: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
`, notes, envSecret, locked.URL, wrongToken, secure.URL, ca, filepath.Join(dir, "no-such-server"), locked.URL, urlSecret, urlSecret, urlSecret))

	t.Run("json", func(t *testing.T) {
		var out, errb bytes.Buffer
		code := run([]string{"doctor", "--config", cfg, "--json", "--timeout", "20s"}, &out, &errb)
		if code != 1 {
			t.Fatalf("exit %d, want 1 (stdout %s, stderr %s)", code, out.String(), errb.String())
		}
		assertNoSecret(t, out.String()+errb.String(), wrongToken, rightToken, envSecret, urlSecret)
		var rep doctorReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("stdout is not the report: %v\n%s", err, out.String())
		}
		if !rep.Config.Valid || len(rep.Config.Errors) != 0 {
			t.Errorf("config = %+v, want valid", rep.Config)
		}
		type row struct{ Name, Transport, Verdict string }
		var rows []row
		by := map[string]serverCheck{}
		for _, s := range rep.Servers {
			rows = append(rows, row{s.Name, s.Transport, s.Verdict})
			by[s.Name] = s
		}
		want := []row{
			{"ghost", "stdio", "fail"},
			{"locked", "http", "fail"},
			{"mine", "http", "warn"},
			{"notes", "stdio", "ok"},
			{"refused", "sse", "fail"},
			{"secure", "http", "ok"},
		}
		if diff := cmp.Diff(rows, want); diff != "" {
			t.Fatalf("servers (-got +want):\n%s\n%s", diff, out.String())
		}
		n := by["notes"]
		if n.Tools == nil || *n.Tools == 0 || n.LatencyMS == nil || n.ProtocolVersion == "" || n.ServerInfo == nil || n.ServerInfo.Name != "notes" {
			t.Errorf("notes = %s, want tools, latency, protocol and server info", js(n))
		}
		if l := by["locked"]; l.Detail != "auth: refused (401)" || l.Tools != nil {
			t.Errorf("locked = %s, want detail %q and no tools", js(l), "auth: refused (401)")
		}
		s := by["secure"]
		if s.Tools == nil || *s.Tools != 2 || s.ServerInfo == nil || *s.ServerInfo != (serverInfo{Name: "sdk-doctor", Version: "2.1.0"}) {
			t.Errorf("secure = %s, want 2 tools of sdk-doctor 2.1.0", js(s))
		}
		if s.TLSNotAfter == nil || !s.TLSNotAfter.Equal(secure.Certificate().NotAfter) {
			t.Errorf("secure tls_not_after = %v, want %v", s.TLSNotAfter, secure.Certificate().NotAfter)
		}
		if g := by["ghost"]; !strings.Contains(g.Detail, "no-such-server") || !strings.Contains(g.Detail, "no such file") {
			t.Errorf("ghost detail = %q, want the command and why it did not start", g.Detail)
		}
		if r := by["refused"]; !strings.HasPrefix(r.Detail, "unreachable: ") || !strings.Contains(r.Detail, "connection refused") {
			t.Errorf("refused detail = %q, want unreachable", r.Detail)
		}
		if m := by["mine"]; m.Detail != "needs a person's connection; not checked" {
			t.Errorf("mine detail = %q", m.Detail)
		}
		// The keys scripts read are there even when null.
		var raw struct {
			Servers []map[string]json.RawMessage `json:"servers"`
		}
		if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"name", "transport", "verdict", "protocol_version", "server_info", "tools", "latency_ms", "tls_not_after", "detail"} {
			if _, ok := raw.Servers[0][k]; !ok {
				t.Errorf("server entry lacks %q: %s", k, out.String())
			}
		}
	})

	t.Run("table", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := run([]string{"doctor", "--config", cfg}, &out, &errb); code != 1 {
			t.Fatalf("exit %d, want 1 (stdout %s, stderr %s)", code, out.String(), errb.String())
		}
		assertNoSecret(t, out.String()+errb.String(), wrongToken, rightToken, envSecret, urlSecret)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var names []string
		cols := map[string][]string{}
		for _, l := range lines[2:] { // the config line, a blank line
			f := strings.Fields(l)
			if len(f) == 0 {
				break // the blank line before the summary
			}
			if f[0] == "stderr|" {
				continue // a failed stdio server's stderr, under its row
			}
			names = append(names, f[0])
			cols[f[0]] = f
		}
		// The rows come in the order the checks end.
		slices.Sort(names[1:])
		if diff := cmp.Diff(names, []string{"SERVER", "ghost", "locked", "mine", "notes", "refused", "secure"}); diff != "" {
			t.Fatalf("rows (-got +want):\n%s\n%s", diff, out.String())
		}
		if f := cols["locked"]; f[2] != "fail" || !strings.Contains(strings.Join(f, " "), "auth: refused (401)") {
			t.Errorf("locked row = %q", f)
		}
		if f := cols["secure"]; f[2] != "ok" || f[7] != secure.Certificate().NotAfter.UTC().Format(time.DateOnly) {
			t.Errorf("secure row = %q, want ok and the certificate's expiry", f)
		}
		if !strings.Contains(errb.String(), "3 of 6 servers failed") {
			t.Errorf("stderr = %q", errb.String())
		}
	})
}

// A config with only reachable servers exits 0; a wrong --timeout is a
// usage error.
func TestDoctorAllOK(t *testing.T) {
	up := newSDKUpstream(t, "", false)
	cfg := writeFile(t, t.TempDir(), "ok.yaml", "servers:\n  sdk:\n    transport: http\n    url: "+up.URL+"\n")
	var out, errb bytes.Buffer
	if code := run([]string{"doctor", "--config", cfg}, &out, &errb); code != 0 {
		t.Fatalf("exit %d, want 0 (stdout %s, stderr %s)", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "sdk") || !strings.Contains(out.String(), " ok ") {
		t.Errorf("stdout = %s", out.String())
	}
	if code := run([]string{"doctor", "--config", cfg, "--timeout", "0s"}, &out, &errb); code != 2 {
		t.Errorf("--timeout 0s: exit %d, want 2", code)
	}
}

// An upstream that never answers the handshake fails at --timeout.
func TestDoctorTimeout(t *testing.T) {
	// The gateway's transport may keep the stalled request's connection
	// after doctor gave up; release lets Close finish.
	release := make(chan struct{})
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(stall.Close)
	t.Cleanup(func() { close(release) })
	cfg := writeFile(t, t.TempDir(), "stall.yaml", "servers:\n  stall:\n    transport: http\n    url: "+stall.URL+"\n")
	var out, errb bytes.Buffer
	start := time.Now()
	code := run([]string{"doctor", "--config", cfg, "--json", "--timeout", "300ms"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (stdout %s, stderr %s)", code, out.String(), errb.String())
	}
	// The verdict is reached at 300ms; letting go of the stalled session
	// is bounded by the upstream package's CloseTimeout.
	if took := time.Since(start); took > 300*time.Millisecond+upstream.CloseTimeout+2*time.Second {
		t.Errorf("took %v with --timeout 300ms", took)
	}
	var rep doctorReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Servers) != 1 || rep.Servers[0].Verdict != "fail" || rep.Servers[0].Detail != "timeout: no answer within 300ms" {
		t.Errorf("servers = %s", js(rep.Servers))
	}
}

// An invalid config exits 2 with the field errors exactly as mcpgate
// validate prints them, and --json says valid: false with them; the
// secret in the file is not echoed.
func TestDoctorInvalidConfig(t *testing.T) {
	const secret = "hunter2-Zq9-secret"
	bad := writeFile(t, t.TempDir(), "bad.yaml", "servers:\n  calc:\n    transport: http\n    url: ftp://"+secret+"@x\n  notes:\n    transport: stdio\n")
	var vout, verr bytes.Buffer
	if code := run([]string{"validate", "--config", bad}, &vout, &verr); code != 1 {
		t.Fatalf("validate exit %d", code)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"doctor", "--config", bad}, &out, &errb); code != 2 {
		t.Fatalf("exit %d, want 2 (stdout %s, stderr %s)", code, out.String(), errb.String())
	}
	got := strings.TrimPrefix(errb.String(), "mcpgate doctor: ")
	want := strings.TrimPrefix(verr.String(), "mcpgate validate: ")
	if got != want || !strings.Contains(got, "servers.calc.url") || !strings.Contains(got, "servers.notes.command") {
		t.Errorf("stderr = %q, want validate's %q", got, want)
	}
	assertNoSecret(t, out.String()+errb.String(), secret)

	out.Reset()
	errb.Reset()
	if code := run([]string{"doctor", "--config", bad, "--json"}, &out, &errb); code != 2 {
		t.Fatalf("--json exit %d, want 2", code)
	}
	var rep doctorReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not the report: %v\n%s", err, out.String())
	}
	var paths []string
	for _, p := range rep.Config.Errors {
		paths = append(paths, p.Path)
	}
	if rep.Config.Valid || rep.Servers == nil || len(rep.Servers) != 0 {
		t.Errorf("report = %s, want invalid and no servers", out.String())
	}
	if diff := cmp.Diff(paths, []string{"servers.calc.url", "servers.notes.command"}); diff != "" {
		t.Errorf("error paths (-got +want):\n%s", diff)
	}
	assertNoSecret(t, out.String()+errb.String(), secret)
}

func assertNoSecret(t testing.TB, output string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(output, s) {
			t.Errorf("output shows the secret %q:\n%s", s, output)
		}
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A certificate near its expiry makes the verdict warn, an expired one
// fail; both report the date.
func TestDoctorTLSExpiry(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		left    time.Duration
		verdict string
		detail  string
	}{
		{"soon", 5*24*time.Hour + time.Hour, "warn", "tls: certificate expires in 5 days"},
		{"expired", -24 * time.Hour, "fail", "tls: certificate expired "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			notAfter := time.Now().Add(tc.left).UTC().Truncate(time.Second)
			certPEM, cert := selfSigned(t, notAfter)
			up := httptest.NewUnstartedServer(sdkHandler(""))
			up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
			up.StartTLS()
			t.Cleanup(up.Close)
			ca := writeFile(t, dir, tc.name+".pem", string(certPEM))
			cfg := writeFile(t, dir, tc.name+".yaml", "servers:\n  web:\n    transport: http\n    url: "+up.URL+"\n    tls: {ca_file: "+ca+"}\n")
			var out, errb bytes.Buffer
			run([]string{"doctor", "--config", cfg, "--json", "--timeout", "5s"}, &out, &errb)
			var rep doctorReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Servers) != 1 {
				t.Fatalf("report: %v\n%s%s", err, out.String(), errb.String())
			}
			s := rep.Servers[0]
			if s.TLSNotAfter == nil || !s.TLSNotAfter.Equal(notAfter) {
				t.Errorf("tls_not_after = %v, want %v", s.TLSNotAfter, notAfter)
			}
			if s.Verdict != tc.verdict {
				t.Errorf("verdict = %q, want %q", s.Verdict, tc.verdict)
			}
			if !strings.Contains(s.Detail, tc.detail) {
				t.Errorf("detail = %q, want %q", s.Detail, tc.detail)
			}
		})
	}
}

// selfSigned is a certificate for 127.0.0.1 valid until notAfter, and
// its PEM.
func selfSigned(t testing.TB, notAfter time.Time) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "doctor-test"},
		NotBefore:             notAfter.Add(-30 * 24 * time.Hour),
		NotAfter:              notAfter,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// POST /admin/v1/servers/{name}/test is the doctor's check of one server
// in a running gateway: a fresh connect, with a verdict and no secret.
func TestServerTestEndpoint(t *testing.T) {
	clearAdminEnv(t)
	const master, token = "master-key-0123456789abcdef", "upstream-token-s3cr3t-77"
	dir := t.TempDir()
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: dir, ToolNameSeparator: "__",
		Auth: &config.CallerAuth{MasterKey: master},
		Servers: map[string]*config.Server{
			"down": {Name: "down", Transport: config.TransportHTTP, URL: "http://127.0.0.1:1/mcp?k=" + token, Timeout: 2 * time.Second,
				Auth: &config.Auth{Type: config.AuthBearer, Value: token}},
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
	code, body := rest(t, "POST", hs.URL+"/admin/v1/servers/down/test", master, "")
	var ch serverCheck
	if code != 200 || json.Unmarshal([]byte(body), &ch) != nil || ch.Verdict != verdictFail || ch.Detail == "" {
		t.Fatalf("test of a server that is down: %d %s", code, body)
	}
	if strings.Contains(body, token) {
		t.Errorf("the answer carries the server's credential: %s", body)
	}
	if code, _ := rest(t, "POST", hs.URL+"/admin/v1/servers/nope/test", master, ""); code != 404 {
		t.Errorf("unknown server: %d", code)
	}
	if code, _ := rest(t, "POST", hs.URL+"/admin/v1/servers/down/test", "", ""); code != 401 {
		t.Errorf("no key: %d", code)
	}
}
