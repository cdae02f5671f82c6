package upstream

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/openapi"
)

// tlsEmpty reports whether t asks for nothing beyond the system defaults.
func tlsEmpty(t *config.TLS) bool {
	return t == nil || (t.VerifyCerts() && t.CA == "" && t.CAFile == "" && t.Cert == "" && t.CertFile == "" && t.Key == "" && t.KeyFile == "")
}

// tlsClientConfig builds the TLS client configuration of a server's tls
// block (SPEC C2); nil (with no error) means the system defaults. Each PEM
// is a value (ca, cert, key) or a file (ca_file, ...): errors name the
// field and the file, never the contents.
func tlsClientConfig(t *config.TLS) (*tls.Config, error) {
	if tlsEmpty(t) {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	// RootCAs stays nil without a ca so that SSL_CERT_FILE and
	// SSL_CERT_DIR keep working.
	if t.CA != "" || t.CAFile != "" {
		data, what, err := pemOf("ca", t.CA, t.CAFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("tls %s: no PEM certificate found", what)
		}
		conf.RootCAs = pool
	}
	hasCert, hasKey := t.Cert != "" || t.CertFile != "", t.Key != "" || t.KeyFile != ""
	if hasCert || hasKey {
		if !hasCert || !hasKey {
			return nil, errors.New("tls: a client certificate and its key must be set together")
		}
		// Read here rather than with tls.LoadX509KeyPair so that a read
		// error says which of the two files it is about.
		certPEM, certWhat, err := pemOf("cert", t.Cert, t.CertFile)
		if err != nil {
			return nil, err
		}
		keyPEM, keyWhat, err := pemOf("key", t.Key, t.KeyFile)
		if err != nil {
			return nil, err
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// The tls package's messages describe the problem, not the data.
			return nil, fmt.Errorf("tls %s, %s: %w", certWhat, keyWhat, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	if !t.VerifyCerts() {
		conf.InsecureSkipVerify = true
	}
	return conf, nil
}

// pemOf is one PEM of a tls block: the value of field, else the file
// field_file names; what names it in messages ("ca", "ca_file <path>").
func pemOf(field, value, file string) (data []byte, what string, err error) {
	if value != "" {
		return []byte(value), field, nil
	}
	data, err = readPEM(field+"_file", file)
	return data, field + "_file " + file, err
}

// readPEM reads one file of a tls block; the error names field and path
// once (a *fs.PathError would repeat the path).
func readPEM(field, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("tls %s %s: %w", field, path, err)
	}
	return data, nil
}

// tlsKey identifies a distinct tls block.
type tlsKey struct {
	verify                    bool
	caFile, certFile, keyFile string
	ca, cert, key             string
}

var (
	tlsClientsMu sync.Mutex
	tlsClients   = map[tlsKey]*http.Client{}

	// ownClients holds the per-tls-block clients, for ownClient. A
	// sync.Map because it is read on every request and written rarely.
	ownClients sync.Map // *http.Client -> struct{}
)

// httpClientForServer returns the package's own client for srv: the
// shared default, or one per distinct tls block. Caching by block lets
// servers with the same block share connections, and keeps reconnects from
// building (and leaking) a transport each time. Files are read when a
// block is first used; later changes to them need a restart.
func httpClientForServer(srv *config.Server) (*http.Client, error) {
	if srv == nil || tlsEmpty(srv.TLS) {
		return defaultHTTPClient(), nil
	}
	t := srv.TLS
	key := tlsKey{verify: t.VerifyCerts(), caFile: t.CAFile, certFile: t.CertFile, keyFile: t.KeyFile, ca: t.CA, cert: t.Cert, key: t.Key}
	tlsClientsMu.Lock()
	defer tlsClientsMu.Unlock()
	if c := tlsClients[key]; c != nil {
		return c, nil
	}
	// Failures are not cached: a fixed file works on the next Connect.
	conf, err := tlsClientConfig(t)
	if err != nil {
		return nil, err
	}
	c := &http.Client{
		Transport:     newH1Transport(newStdTransport(conf), usesEnvProxy),
		CheckRedirect: sameOriginRedirect,
	}
	tlsClients[key] = c
	ownClients.Store(c, struct{}{})
	return c, nil
}

// docKey identifies a client of docClient.
type docKey struct {
	tls  tlsKey
	host string
}

var (
	docClientsMu sync.Mutex
	docClients   = map[docKey]*http.Client{}
)

// docClient is the client of an openapi server's requests when their base
// URL came from a document fetched by URL: it dials as the fetch of the
// document did (openapi.Dial: public addresses only, unless base names a
// loopback host), through no proxy (the address the rule judges would be
// the proxy's), with the server's tls block and the same-origin redirect
// rule. One per tls block and host, bounded like the configured servers.
func docClient(srv *config.Server, base *url.URL) (*http.Client, error) {
	var key docKey
	if t := srv.TLS; t != nil {
		key.tls = tlsKey{verify: t.VerifyCerts(), caFile: t.CAFile, certFile: t.CertFile, keyFile: t.KeyFile, ca: t.CA, cert: t.Cert, key: t.Key}
	}
	key.host = strings.ToLower(base.Hostname())
	docClientsMu.Lock()
	defer docClientsMu.Unlock()
	if c := docClients[key]; c != nil {
		return c, nil
	}
	conf, err := tlsClientConfig(srv.TLS)
	if err != nil {
		return nil, err
	}
	tr := newStdTransport(conf)
	tr.Proxy = nil
	tr.DialContext = openapi.Dial(base, 10*time.Second)
	c := &http.Client{Transport: tr, CheckRedirect: sameOriginRedirect}
	docClients[key] = c
	return c, nil
}

// ownClient reports whether c was built by this package (no jar, no
// timeout, same-origin redirects), so httpBase.send may skip Client.Do.
func ownClient(c *http.Client) bool {
	if c == defaultHTTPClient() {
		return true
	}
	_, ok := ownClients.Load(c)
	return ok
}

// ServerCertificate dials the host of srv's https URL with the server's
// tls block, as the gateway's connections do, and returns the leaf
// certificate it presents (mcpgate doctor reads its expiry). A
// certificate that fails verification only because it has expired is
// still returned, with the error. It goes straight to the host: a proxy
// from the environment is not used. Errors never contain the URL, which
// may carry credentials.
func ServerCertificate(ctx context.Context, srv *config.Server) (*x509.Certificate, error) {
	u, err := url.Parse(cmp.Or(srv.URL, srv.BaseURL)) // openapi: the API's base_url
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("not an https url")
	}
	conf, err := tlsClientConfig(srv.TLS)
	if err != nil {
		return nil, err
	}
	if conf == nil {
		conf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	conf = conf.Clone()
	conf.ServerName = u.Hostname()
	port := u.Port()
	if port == "" {
		port = "443"
	}
	d := tls.Dialer{Config: conf}
	if srv.DenyLinkLocal {
		// A runtime server's certificate is fetched under its address
		// guard, as its requests are (dialguard.go).
		if netaddr.MetadataHost(u.Hostname()) {
			return nil, ErrAddressRefused
		}
		d.NetDialer = oauth.RefusingDialer(&net.Dialer{Timeout: guardDialTimeout}, netaddr.MetadataAddr, ErrAddressRefused)
	}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		var ce x509.CertificateInvalidError
		if errors.As(err, &ce) && ce.Reason == x509.Expired && ce.Cert != nil {
			return ce.Cert, err
		}
		return nil, err
	}
	defer c.Close()
	certs := c.(*tls.Conn).ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("tls: the server presented no certificate")
	}
	return certs[0], nil
}
