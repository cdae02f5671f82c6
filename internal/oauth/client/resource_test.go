package client

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalResource(t *testing.T) {
	for in, want := range map[string]string{
		"https://mcp.example.com/mcp":                      "https://mcp.example.com/mcp",
		"HTTPS://MCP.Example.COM/MCP":                      "https://mcp.example.com/MCP", // the path keeps its case
		"https://mcp.example.com/mcp/":                     "https://mcp.example.com/mcp",
		"https://mcp.example.com":                          "https://mcp.example.com",
		"https://mcp.example.com/":                         "https://mcp.example.com/",
		"https://mcp.example.com:8443/a/b#frag":            "https://mcp.example.com:8443/a/b",
		"https://user:pw@mcp.example.com/mcp?key=secret#x": "https://mcp.example.com/mcp",
		"http://127.0.0.1:9/a%2Fb/":                        "http://127.0.0.1:9/a%2Fb",
	} {
		got, err := CanonicalResource(in)
		if err != nil || got != want {
			t.Errorf("CanonicalResource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/mcp", "ftp://x/y", "mcp.example.com/mcp", "https://pw-secret@/x"} {
		if got, err := CanonicalResource(in); err == nil {
			t.Errorf("CanonicalResource(%q) = %q, want an error", in, got)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error echoes the url: %v", err)
		}
	}
}

func TestMetadataURLs(t *testing.T) {
	u, _ := url.Parse("https://example.com/public/mcp/")
	if got, want := ResourceMetadataURLs(u), []string{"https://example.com/.well-known/oauth-protected-resource/public/mcp",
		"https://example.com/.well-known/oauth-protected-resource"}; !slices.Equal(got, want) {
		t.Errorf("ResourceMetadataURLs = %q, want %q", got, want)
	}
	u, _ = url.Parse("https://example.com")
	if got, want := ResourceMetadataURLs(u), []string{"https://example.com/.well-known/oauth-protected-resource"}; !slices.Equal(got, want) {
		t.Errorf("ResourceMetadataURLs = %q, want %q", got, want)
	}
	u, _ = url.Parse("https://auth.example.com/tenant1")
	if got, want := AuthServerMetadataURLs(u), []string{"https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
		"https://auth.example.com/.well-known/openid-configuration/tenant1", "https://auth.example.com/tenant1/.well-known/openid-configuration",
		"https://auth.example.com/tenant1/.well-known/oauth-authorization-server"}; !slices.Equal(got, want) {
		t.Errorf("AuthServerMetadataURLs = %q, want %q", got, want)
	}
	u, _ = url.Parse("https://auth.example.com/")
	if got, want := AuthServerMetadataURLs(u), []string{"https://auth.example.com/.well-known/oauth-authorization-server",
		"https://auth.example.com/.well-known/openid-configuration"}; !slices.Equal(got, want) {
		t.Errorf("AuthServerMetadataURLs = %q, want %q", got, want)
	}
}
