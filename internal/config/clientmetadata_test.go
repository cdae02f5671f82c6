package config

import (
	"strings"
	"testing"
)

func TestClientMetadataDocument(t *testing.T) {
	tests := []struct {
		name, doc string
		url, path string
		ok        bool
	}{
		{"default under https public_url", "public_url: https://mcp.example.com/\n", "https://mcp.example.com/oauth/client-metadata.json", "/oauth/client-metadata.json", true},
		{"default under a path prefix", "public_url: https://example.com/gw\n", "https://example.com/gw/oauth/client-metadata.json", "/oauth/client-metadata.json", true},
		{"configured", "public_url: https://example.com/gw\nclient_metadata_url: https://example.com/gw/client.json\n", "https://example.com/gw/client.json", "/client.json", true},
		{"http public_url: none", "public_url: http://127.0.0.1:4000\n", "", "", false},
		{"no public_url: none", "listen: 127.0.0.1:4000\n", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			u, p, ok := c.ClientMetadataDocument()
			if u != tt.url || p != tt.path || ok != tt.ok {
				t.Errorf("ClientMetadataDocument() = %q, %q, %t; want %q, %q, %t", u, p, ok, tt.url, tt.path, tt.ok)
			}
		})
	}
}

func TestClientMetadataURLErrors(t *testing.T) {
	tests := []struct{ name, doc, want string }{
		{"no public_url", "client_metadata_url: https://a.example/c.json\n", "client_metadata_url: needs an https public_url"},
		{"http public_url", "public_url: http://a.example\nclient_metadata_url: https://a.example/c.json\n", "client_metadata_url: needs an https public_url"},
		{"other origin", "public_url: https://a.example\nclient_metadata_url: https://b.example/c.json\n", "client_metadata_url: must be under public_url"},
		{"beside the prefix", "public_url: https://a.example/gw\nclient_metadata_url: https://a.example/gwx/c.json\n", "client_metadata_url: must be under public_url"},
		{"not json", "public_url: https://a.example\nclient_metadata_url: https://a.example/mcp\n", "client_metadata_url: must name a .json document"},
		{"query", "public_url: https://a.example\nclient_metadata_url: 'https://a.example/c.json?x=1'\n", "client_metadata_url: must be an https URL without user info, query or fragment"},
		{"fragment", "public_url: https://a.example\nclient_metadata_url: 'https://a.example/c.json#x'\n", "client_metadata_url: must be an https URL without user info, query or fragment"},
		{"dot segment", "public_url: https://a.example\nclient_metadata_url: https://a.example/x/../c.json\n", "client_metadata_url: must not have dot segments"},
		{"escaped", "public_url: https://a.example\nclient_metadata_url: https://a.example/%2e%2e/c.json\n", "client_metadata_url: must name a .json document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// FuzzClientMetadataPath: whatever public_url and client_metadata_url
// hold, an accepted document URL is public_url (https) followed by a
// .json path without dot segments, escapes or empty segments, and that
// path is what the gateway serves.
func FuzzClientMetadataPath(f *testing.F) {
	f.Add("https://gw.example", "https://gw.example/client-metadata.json")
	f.Add("https://gw.example/base/", "https://gw.example/base/oauth/c.json")
	f.Add("https://gw.example", "https://gw.example/a/../c.json")
	f.Add("http://gw.example", "https://gw.example/c.json")
	f.Add("https://gw.example", "https://gw.example.evil/c.json")
	f.Fuzz(func(t *testing.T, public, doc string) {
		c := &Config{PublicURL: public, ClientMetadataURL: doc}
		path, err := c.clientMetadataPath(doc)
		if err != nil {
			return
		}
		base := strings.TrimRight(public, "/")
		if !strings.HasPrefix(base, "https://") || base+path != doc {
			t.Fatalf("accepted %q under %q as path %q", doc, public, path)
		}
		if !strings.HasPrefix(path, "/") || !strings.HasSuffix(path, ".json") || strings.Contains(path, "//") || strings.ContainsAny(path, "%?#") {
			t.Fatalf("path %q", path)
		}
		for _, seg := range strings.Split(path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("dot segment in %q", path)
			}
		}
		if u, p, ok := c.ClientMetadataDocument(); !ok || u != doc || p != path {
			t.Fatalf("ClientMetadataDocument() = %q, %q, %t for an accepted %q", u, p, ok, doc)
		}
	})
}
