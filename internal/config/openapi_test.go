package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenAPIServer(t *testing.T) {
	doc := `servers:
  pets:
    transport: openapi
    spec: specs/petstore.yaml
    base_url: https://petstore.example/api/v3
    auth: {type: api_key, value: k}
    headers: {X-Team: a}
    operations:
      include: [getPetById, "GET /pet/*"]
      exclude: ["DELETE /pet/{petId}"]
  remote:
    transport: openapi
    spec: https://api.example/openapi.json
`
	c, err := Parse([]byte(doc), "/cfg", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Servers["pets"]
	if want := filepath.Join("/cfg", "specs/petstore.yaml"); s.Spec != want {
		t.Errorf("spec = %q, want %q (resolved against the config dir)", s.Spec, want)
	}
	if got := c.Servers["remote"].Spec; got != "https://api.example/openapi.json" {
		t.Errorf("a URL spec was changed: %q", got)
	}
	if s.Operations == nil || len(s.Operations.Include) != 2 || len(s.Operations.Exclude) != 1 {
		t.Errorf("operations = %+v", s.Operations)
	}
}

func TestOpenAPIServerErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"no spec", "servers:\n  p: {transport: openapi}\n", "servers.p.spec: "},
		{"url on openapi", "servers:\n  p: {transport: openapi, spec: a.yaml, url: http://x}\n", "servers.p.url: "},
		{"spec on http", "servers:\n  p: {transport: http, url: http://x, spec: a.yaml}\n", "servers.p.spec: "},
		{"bad base_url", "servers:\n  p: {transport: openapi, spec: a.yaml, base_url: ftp://x}\n", "servers.p.base_url: must be an http or https URL"},
		{"bad spec url", "servers:\n  p: {transport: openapi, spec: 'http://'}\n", "servers.p.spec: must be a file or an http or https URL"},
		{"bad pattern", "servers:\n  p: {transport: openapi, spec: a.yaml, operations: {include: ['GET pets']}}\n", "servers.p.operations.include[0]: must be an operationId"},
		{"oauth2_user", "servers:\n  p: {transport: openapi, spec: a.yaml, auth: {type: oauth2_user}}\n", "servers.p.auth.type: oauth2_user is not supported"},
		{"oauth2 without base_url", "servers:\n  p: {transport: openapi, spec: a.yaml, auth: {type: oauth2, client_id: a, client_secret: b, token_url: 'https://as/token'}}\n", "servers.p.base_url: required with auth oauth2"},
		{"oauth2 without token_url", "servers:\n  p: {transport: openapi, spec: a.yaml, auth: {type: oauth2, client_id: a, client_secret: b}}\n", "servers.p.auth.token_url: token_url or authorization_server is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "/cfg", envOf(nil))
			if err == nil {
				t.Fatalf("Parse succeeded, want %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one starting %q", err, tt.want)
			}
		})
	}
}

func TestValidOperationPattern(t *testing.T) {
	for pat, want := range map[string]bool{
		"getPetById": true, "GET /pet/{petId}": true, "get /pet/*": true,
		"": false, "GET pet": false, "GET /[": false,
	} {
		if got := ValidOperationPattern(pat); got != want {
			t.Errorf("ValidOperationPattern(%q) = %v, want %v", pat, got, want)
		}
	}
}
