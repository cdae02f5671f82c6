package upstream

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, both signed by it. The CA and client PEMs are files,
// as a tls block names them.
type testPKI struct {
	caFile, certFile, keyFile string
	caPool                    *x509.CertPool
	serverCert                tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(0)
	template := func(cn string) *x509.Certificate {
		serial++
		return &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
		}
	}
	writePEM := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	caKey := newKey()
	caTmpl := template("mcpgate test CA")
	caTmpl.IsCA = true
	caTmpl.BasicConstraintsValid = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{caFile: writePEM("ca.pem", "CERTIFICATE", caDER), caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)

	srvKey := newKey()
	srvTmpl := template("127.0.0.1")
	srvTmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	srvTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.serverCert = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}

	cliKey := newKey()
	cliTmpl := template("mcpgate test client")
	cliTmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	cliDER, err := x509.CreateCertificate(rand.Reader, cliTmpl, ca, &cliKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.certFile = writePEM("client.pem", "CERTIFICATE", cliDER)
	p.keyFile = writePEM("client-key.pem", "PRIVATE KEY", keyDER)
	return p
}

// newTLSFake serves the streamable fake over https. configure may set
// the server's TLS config (nil: httptest's own self-signed certificate)
// or EnableHTTP2 before StartTLS.
func newTLSFake(t *testing.T, configure func(*httptest.Server)) *streamableFake {
	t.Helper()
	s := &streamableFake{fake: newFake(), t: t, get: make(chan []byte, 16)}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	// Failed handshakes are the point of some tests: keep them out of the log.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if configure != nil {
		configure(s.srv)
	}
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

// withCert makes the server present the PKI's certificate; clientAuth
// additionally requires a client certificate signed by the PKI's CA.
func withCert(p *testPKI, clientAuth bool) func(*httptest.Server) {
	return func(s *httptest.Server) {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{p.serverCert}}
		if clientAuth {
			s.TLS.ClientAuth = tls.RequireAndVerifyClientCert
			s.TLS.ClientCAs = p.caPool
		}
	}
}

// connectAndList connects to url with the tls block and lists the tools.
func connectAndList(t *testing.T, url string, tb *config.TLS) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Connect(ctx, Options{Server: &config.Server{
		Name: "tls", Transport: config.TransportHTTP, URL: url, Timeout: 5 * time.Second, TLS: tb,
	}})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.Call(ctx, mcpwire.MethodToolsList, nil)
	if err != nil {
		return err
	}
	if !strings.Contains(string(res), `"echo"`) {
		return fmt.Errorf("unexpected tools/list result %.200s", res)
	}
	return nil
}

func wantKind(t *testing.T, err error, kind Kind) *Error {
	t.Helper()
	var ue *Error
	if !errors.As(err, &ue) || ue.Kind != kind {
		t.Fatalf("error = %v (%T), want an *Error of kind %s", err, err, kind)
	}
	return ue
}

func TestTLSCAFile(t *testing.T) {
	p := newTestPKI(t)
	s := newTLSFake(t, withCert(p, false))
	if err := connectAndList(t, s.srv.URL+"/mcp", &config.TLS{CAFile: p.caFile}); err != nil {
		t.Fatal(err)
	}
}

func TestTLSUnknownAuthority(t *testing.T) {
	p := newTestPKI(t)
	s := newTLSFake(t, withCert(p, false))
	err := connectAndList(t, s.srv.URL+"/mcp", nil)
	if err == nil {
		t.Fatal("connected to a server signed by an unknown CA without a tls block")
	}
	wantKind(t, err, KindUnreachable)
	t.Logf("error: %v", err)
	// The real cause is in the message (C6.1).
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error %q does not say it is a certificate problem", err)
	}
}

func TestTLSVerifyFalse(t *testing.T) {
	s := newTLSFake(t, nil)
	off := false
	if err := connectAndList(t, s.srv.URL+"/mcp", &config.TLS{Verify: &off}); err != nil {
		t.Fatal(err)
	}
}

func TestTLSClientCertificate(t *testing.T) {
	p := newTestPKI(t)
	s := newTLSFake(t, withCert(p, true))
	url := s.srv.URL + "/mcp"
	if err := connectAndList(t, url, &config.TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	err := connectAndList(t, url, &config.TLS{CAFile: p.caFile})
	if err == nil {
		t.Fatal("connected without the client certificate the server requires")
	}
	wantKind(t, err, KindUnreachable)
	t.Logf("error: %v", err)
}

// TestTLSValues: a tls block may carry the PEMs themselves (ca, cert,
// key), as servers added through the admin API must, and they work like
// the files; a bad value's error names the field, never the content.
func TestTLSValues(t *testing.T) {
	p := newTestPKI(t)
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	s := newTLSFake(t, withCert(p, true))
	url := s.srv.URL + "/mcp"
	if err := connectAndList(t, url, &config.TLS{CA: read(p.caFile), Cert: read(p.certFile), Key: read(p.keyFile)}); err != nil {
		t.Fatalf("with values: %v", err)
	}
	if err := connectAndList(t, url, &config.TLS{CA: read(p.caFile), CertFile: p.certFile, Key: read(p.keyFile)}); err != nil {
		t.Fatalf("with a value and a file: %v", err)
	}
	err := connectAndList(t, url, &config.TLS{CA: "not a certificate", Cert: read(p.certFile), Key: read(p.keyFile)})
	if err == nil || !strings.Contains(err.Error(), "tls ca: no PEM certificate found") {
		t.Errorf("bad ca value: %v", err)
	}
	err = connectAndList(t, url, &config.TLS{CA: read(p.caFile), Cert: read(p.certFile), Key: read(p.caFile)})
	if err == nil || !strings.Contains(err.Error(), "tls cert, key: ") || strings.Contains(err.Error(), "BEGIN") {
		t.Errorf("key value that is no key: %v", err)
	}
}

func TestTLSBadFiles(t *testing.T) {
	p := newTestPKI(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		tls  *config.TLS
		want []string
	}{
		{"ca without PEM", &config.TLS{CAFile: notPEM}, []string{"ca_file", notPEM, "no PEM certificate"}},
		{"ca missing", &config.TLS{CAFile: missing}, []string{"ca_file", missing}},
		{"key missing", &config.TLS{CertFile: p.certFile, KeyFile: missing}, []string{"key_file", missing}},
		{"key is not a key", &config.TLS{CertFile: p.certFile, KeyFile: p.caFile}, []string{p.certFile, p.caFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Files are read before anything is dialled.
			err := connectAndList(t, "https://127.0.0.1:1/mcp", tc.tls)
			if err == nil {
				t.Fatal("Connect succeeded")
			}
			wantKind(t, err, KindInternal)
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error %q quotes file contents", err)
			}
		})
	}
}

func TestTLSClientCache(t *testing.T) {
	p := newTestPKI(t)
	off := false
	srv := func(tb *config.TLS) *config.Server {
		return &config.Server{Name: "x", Transport: config.TransportHTTP, URL: "https://127.0.0.1/mcp", TLS: tb}
	}
	get := func(tb *config.TLS) *http.Client {
		t.Helper()
		c, err := httpClientForServer(srv(tb))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := get(&config.TLS{CAFile: p.caFile})
	if b := get(&config.TLS{CAFile: p.caFile}); a != b {
		t.Error("identical tls blocks got different clients")
	}
	if b := get(&config.TLS{CAFile: p.caFile, Verify: &off}); a == b {
		t.Error("different tls blocks share a client")
	}
	ca, err := os.ReadFile(p.caFile)
	if err != nil {
		t.Fatal(err)
	}
	if b := get(&config.TLS{CA: string(ca)}); a == b {
		t.Error("a ca value shares the client of a ca_file")
	}
	if b := get(&config.TLS{CAFile: p.caFile, CertFile: p.certFile, KeyFile: p.keyFile}); a == b {
		t.Error("different tls blocks share a client")
	}
	if get(nil) != defaultHTTPClient() || get(&config.TLS{}) != defaultHTTPClient() {
		t.Error("no or an empty tls block does not use the default client")
	}
	if !ownClient(a) {
		t.Error("a per-tls-block client does not take the fast path")
	}
	if ownClient(&http.Client{Transport: a.Transport}) {
		t.Error("a foreign client takes the fast path")
	}

	// An explicit client wins over the tls block (httpClientFor may hand
	// back a copy, so compare transports).
	mine := &http.Client{Transport: &http.Transport{}}
	got, err := httpClientFor(&Options{Server: srv(&config.TLS{CAFile: p.caFile}), HTTPClient: mine})
	if err != nil || got.Transport != mine.Transport {
		t.Errorf("httpClientFor = %v, %v; want the explicit client's transport", got, err)
	}
}

func TestTLSHTTP2(t *testing.T) {
	p := newTestPKI(t)
	var h1, h2 atomic.Int32
	s := newTLSFake(t, func(srv *httptest.Server) {
		withCert(p, false)(srv)
		srv.EnableHTTP2 = true
		next := srv.Config.Handler
		srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 {
				h2.Add(1)
			} else {
				h1.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	})
	if err := connectAndList(t, s.srv.URL+"/mcp", &config.TLS{CAFile: p.caFile}); err != nil {
		t.Fatal(err)
	}
	if h2.Load() == 0 || h1.Load() != 0 {
		t.Errorf("requests over HTTP/2: %d, over HTTP/1: %d; want all over HTTP/2", h2.Load(), h1.Load())
	}
}
