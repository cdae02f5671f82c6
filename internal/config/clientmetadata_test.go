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
