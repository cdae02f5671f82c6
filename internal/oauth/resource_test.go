package oauth

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestCanonicalResource(t *testing.T) {
	for _, tt := range []struct {
		in, want string // want "" = refused
	}{
		{"https://gw.example/mcp", "https://gw.example/mcp"},
		{"HTTPS://GW.Example/mcp", "https://gw.example/mcp"},
		{"https://gw.example:443/mcp", "https://gw.example/mcp"},
		{"http://gw.example:80/mcp", "http://gw.example/mcp"},
		{"http://gw.example:443/mcp", "http://gw.example:443/mcp"},
		{"https://gw.example:0443/mcp", "https://gw.example/mcp"},
		{"https://gw.example:/mcp", "https://gw.example/mcp"},
		{"http://127.0.0.1:4000/mcp/alpha", "http://127.0.0.1:4000/mcp/alpha"},
		{"http://[::1]:4000/mcp", "http://[::1]:4000/mcp"},
		{"http://[::FFFF:7f00:1]/mcp", "http://[::ffff:7f00:1]/mcp"},
		{"https://gw.example/mcp/alpha/", "https://gw.example/mcp/alpha"},
		{"https://gw.example/admin/v1/", "https://gw.example/admin/v1"},
		{"https://gw.example/", "https://gw.example"},
		{"https://gw.example", "https://gw.example"},
		{"https://gw.example/mcp/%61lpha", "https://gw.example/mcp/alpha"},
		{"https://gw.example/mcp/alpha,beta", "https://gw.example/mcp/alpha,beta"},
		{"https://gw.example/MCP", "https://gw.example/MCP"}, // paths are case-sensitive
		{"https://gw.example/p/toolset/x/mcp", "https://gw.example/p/toolset/x/mcp"},

		// Dot segments in every spelling, and what could decode into one.
		{"https://gw.example/mcp/alpha/../admin/v1", ""},
		{"https://gw.example/mcp/./alpha", ""},
		{"https://gw.example/mcp/%2e%2e/admin/v1", ""},
		{"https://gw.example/mcp/%2E%2E/admin/v1", ""},
		{"https://gw.example/mcp/.%2e/admin/v1", ""},
		{"https://gw.example/mcp/%2e/x", ""},
		{"https://gw.example/mcp/..", ""},
		{"https://gw.example/mcp/alpha%2f..%2fadmin", ""},
		{"https://gw.example/mcp/alpha%2F..%2Fadmin", ""},
		{"https://gw.example/mcp/%252e%252e/admin", ""},
		{"https://gw.example/mcp/a%5cb", ""},
		{"https://gw.example/mcp\\..\\admin", ""},
		{"https://gw.example//admin/v1", ""},
		{"https://gw.example/mcp//alpha", ""},
		{"https://gw.example/mcp//", ""},
		{"https://gw.example/mcp/%", ""},
		{"https://gw.example/mcp/%4", ""},
		{"https://gw.example/mcp/%zz", ""},
		{"https://gw.example/mcp/a b", ""},
		{"https://gw.example/mcp/\u00e9", ""},
		{"https://gw.example/mcp/<x>", ""},

		// Query, fragment, user info, other schemes, no host.
		{"https://gw.example/mcp#x", ""},
		{"https://gw.example/mcp#", ""},
		{"https://gw.example/mcp?x=1", ""},
		{"https://gw.example/mcp?", ""},
		{"https://user@gw.example/mcp", ""},
		{"https://user:pw@gw.example/mcp", ""},
		{"https://gw.example@evil.example/mcp", ""},
		{"ftp://gw.example/mcp", ""},
		{"javascript://gw.example/mcp", ""},
		{"//gw.example/mcp", ""},
		{"/mcp", ""},
		{"mcp", ""},
		{"https:///mcp", ""},
		{"https://:443/mcp", ""},
		{"https://gw.example:99999/mcp", ""},
		{"https://gw.example:-1/mcp", ""},
		{"https://gw.example:+443/mcp", ""},
		{"https://gw.example:x/mcp", ""},
		{"https://[::1/mcp", ""},
		{"https://[1.2.3.4]/mcp", ""},
		{"https://[fe80::1%25en0]/mcp", ""},
		{"https://gw%2eexample/mcp", ""},
		{"https://gw.example\x00/mcp", ""},
		{"", ""},
		{"https://gw.example/" + strings.Repeat("a", MaxResourceLen), ""},
	} {
		got, err := CanonicalResource(tt.in)
		if tt.want == "" {
			if !errors.Is(err, ErrResource) {
				t.Errorf("CanonicalResource(%q) = %q, %v; want refused", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CanonicalResource(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSameResource(t *testing.T) {
	for _, tt := range []struct {
		aud, resource string
		want          bool
	}{
		{"https://gw.example/mcp", "https://gw.example/mcp", true},
		{"https://GW.example:443/mcp/", "https://gw.example/mcp", true},
		{"https://gw.example/mcp", "https://GW.EXAMPLE/mcp", true},
		{"https://gw.example", "https://gw.example/mcp", false},
		{"https://gw.example/", "https://gw.example/admin/v1", false},
		{"https://gw.example/mcp/alpha", "https://gw.example/mcp/beta", false},
		{"https://gw.example/mcp/alpha", "https://gw.example/mcp", false},
		{"https://gw.example/mcp/alpha", "https://gw.example/admin/v1", false},
		{"https://gw.example/mcp/alpha/../../admin/v1", "https://gw.example/admin/v1", false},
		{"https://gw.example/admin/v1", "https://gw.example/mcp/admin/v1", false},
		{"http://gw.example/mcp", "https://gw.example/mcp", false},
		{"https://gw.example/mcp", "", false},
		{"", "", false},
		{"https://gw.example/mcp?x", "https://gw.example/mcp?x", false},
	} {
		if got := SameResource(tt.aud, tt.resource); got != tt.want {
			t.Errorf("SameResource(%q, %q) = %v, want %v", tt.aud, tt.resource, got, tt.want)
		}
	}
}

// FuzzCanonicalResource: the parse never panics, and what it returns is
// a fixed point (canonical twice is canonical once) that Go's own URL
// parser reads back as the same scheme, host and path, with nothing that
// a later decoding, a dot-segment removal or a query/fragment split
// could give a second meaning to.
func FuzzCanonicalResource(f *testing.F) {
	for _, s := range []string{
		"https://gw.example/mcp", "HTTP://GW:80/mcp/alpha/", "https://gw.example/mcp/%2e%2e/admin/v1",
		"http://[::1]:4000/toolset/x/mcp", "https://gw.example/mcp/alpha%2F..%2Fadmin", "https://u@h/p?q#f",
		"https://gw.example/mcp/%61lpha", "https://gw.example:0443//x", "https://gw.example/a,b;c=d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := CanonicalResource(raw)
		if err != nil {
			if got != "" {
				t.Fatalf("refused %q but returned %q", raw, got)
			}
			return
		}
		again, err := CanonicalResource(got)
		if err != nil || again != got {
			t.Fatalf("not a fixed point: %q -> %q -> %q, %v", raw, got, again, err)
		}
		if !SameResource(raw, got) || !SameResource(got, raw) {
			t.Fatalf("SameResource(%q, %q) is false", raw, got)
		}
		if strings.ContainsAny(got, "?#%\\ ") || strings.HasSuffix(got, "/") {
			t.Fatalf("canonical %q of %q has a query, fragment, encoding or trailing slash", got, raw)
		}
		u, err := url.Parse(got)
		if err != nil {
			t.Fatalf("canonical %q does not parse: %v", got, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.Host != strings.ToLower(u.Host) || u.User != nil ||
			u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			t.Fatalf("canonical %q of %q parses as %#v", got, raw, u)
		}
		if want := u.Scheme + "://" + u.Host + u.Path; want != got {
			t.Fatalf("canonical %q of %q reads back as %q", got, raw, want)
		}
		for _, seg := range strings.Split(u.Path, "/")[1:] {
			if seg == "" || seg == "." || seg == ".." {
				t.Fatalf("canonical %q of %q has the segment %q", got, raw, seg)
			}
		}
		if p := u.Port(); p == "80" && u.Scheme == "http" || p == "443" && u.Scheme == "https" {
			t.Fatalf("canonical %q keeps the default port", got)
		}
	})
}
