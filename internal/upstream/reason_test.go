package upstream

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What a caller is told of an upstream failure names no internal
// address, host, port, resolver, URL or path, and still says what went
// wrong.
func TestReason(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8443},
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	lookup := &net.DNSError{Err: "no such host", Name: "billing.internal.corp", Server: "127.0.0.53:53", IsNotFound: true}
	wrap := func(kind Kind, err error) error { return &Error{Server: "alpha", Kind: kind, Err: err} }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"dial refused", wrap(KindUnreachable, fmt.Errorf("POST %s: %w", "http://10.0.0.5:8443/mcp", dial)), "connection refused"},
		{"dns", wrap(KindUnreachable, fmt.Errorf("POST http://billing.internal.corp/mcp: %w", &net.OpError{Op: "dial", Net: "tcp", Err: lookup})), "host name not found"},
		{"dns timeout", wrap(KindUnreachable, &net.DNSError{Err: "i/o timeout", Name: "x.corp", Server: "10.255.255.53:53", IsTimeout: true}), "host name lookup timed out"},
		{"reset", wrap(KindClosed, &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}), "connection reset"},
		{"unreachable", wrap(KindUnreachable, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.EHOSTUNREACH}}), "host unreachable"},
		{"tls", wrap(KindUnreachable, fmt.Errorf("GET https://10.0.0.5/: %w", x509.HostnameError{Host: "10.0.0.5", Certificate: &x509.Certificate{}})), "TLS handshake failed"},
		{"stdio start", wrap(KindUnreachable, fmt.Errorf("start /opt/secret/bin/tool: %w", &exec.Error{Name: "/opt/secret/bin/tool", Err: exec.ErrNotFound})), "the server's command could not be started"},
		{"fork", wrap(KindUnreachable, fmt.Errorf("start /opt/x: %w", &fs.PathError{Op: "fork/exec", Path: "/opt/x", Err: syscall.ENOENT})), "the server's command could not be started"},
		{"ca file", wrap(KindInternal, &fs.PathError{Op: "open", Path: "/etc/mcpgate/ca.pem", Err: syscall.ENOENT}), "a file the server's configuration names could not be read"},
		{"timeout", wrap(KindTimeout, &timeoutError{method: "tools/call", budget: 1500 * time.Millisecond}), "tools/call timed out after 1.5s"},
		{"too large", wrap(KindInvalidResponse, &MessageTooLargeError{Limit: 16 << 20}), "upstream message exceeds the 16 MiB limit (limits.max_upstream_message)"},
		{"http status", wrap(KindAuth, errors.New("HTTP 401")), "HTTP 401"},
		{"discovery url", wrap(KindUnreachable, errors.New("oauth2 discovery: https://as.internal.corp:8443/.well-known/oauth-authorization-server answered HTTP 500")),
			"oauth2 discovery: /.well-known/oauth-authorization-server answered HTTP 500"},
		{"flattened dial text", wrap(KindUnreachable, errors.New("connect: dial tcp 10.0.0.5:8443: connection refused")), "unreachable"},
		{"bare host:port", wrap(KindInvalidResponse, errors.New("answer from billing.internal:8443 was not MCP")), "invalid response"},
		{"not an Error", fmt.Errorf("get: %w", dial), "connection refused"},
		{"no cause", &Error{Server: "alpha", Kind: KindClosed}, "closed"},
		{"nil", nil, ""},
	} {
		got := Reason(tc.err)
		if got != tc.want {
			t.Errorf("%s: Reason = %q, want %q", tc.name, got, tc.want)
		}
		for _, leak := range []string{"10.0.0.5", "8443", "127.0.0.53", "10.255", "internal", "/opt", "/etc", "dial"} {
			if strings.Contains(got, leak) {
				t.Errorf("%s: %q names %q", tc.name, got, leak)
			}
		}
	}
}
