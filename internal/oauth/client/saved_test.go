package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/oauth/client"
)

// A saved plan restores to one that refreshes as the original did; a
// saved document for another server or redirect URI, or naming endpoints
// discovery would have refused, does not restore; printing it shows no
// secret.
func TestSaveRestore(t *testing.T) {
	f := newFake(t)
	f.standard(asMetadata)
	cfg := client.Config{ServerURL: f.url + "/mcp", RedirectURI: callback}
	p, err := client.Discover(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := client.Client{ID: "cid", Secret: "client-secret-s3", AuthMethod: client.AuthClientSecretPost, Source: client.SourceDynamic}
	doc, err := json.Marshal(p.Save(c))
	if err != nil {
		t.Fatal(err)
	}
	var s client.Saved
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatal(err)
	}
	rp, rc, err := client.Restore(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	if rc != c || rp.Resource != p.Resource || strings.Join(rp.Scopes, " ") != strings.Join(p.Scopes, " ") || rp.AuthServer.TokenEndpoint != p.AuthServer.TokenEndpoint {
		t.Errorf("restored %+v %v, want %+v %v", rp, rc, p, c)
	}
	if tok, err := rp.Refresh(t.Context(), rc, "rt-0"); err != nil || tok.AccessToken != "at-1" {
		t.Fatalf("refresh with the restored plan: %v %v", tok, err)
	}
	if form := f.lastForm(); form.Get("client_secret") != "client-secret-s3" || form.Get("resource") != f.url+"/mcp" {
		t.Errorf("token request %v", form)
	}

	for name, edit := range map[string]func(*client.Config, *client.Saved){
		"another server url":   func(c *client.Config, _ *client.Saved) { c.ServerURL = f.url + "/other" },
		"another redirect uri": func(c *client.Config, _ *client.Saved) { c.RedirectURI = callback + "2" },
	} {
		c2, s2 := cfg, s
		edit(&c2, &s2)
		if _, _, err := client.Restore(c2, s2); !errors.Is(err, client.ErrStaleRegistration) {
			t.Errorf("%s: %v, want ErrStaleRegistration", name, err)
		}
	}
	for name, edit := range map[string]func(*client.Saved){
		"http token endpoint elsewhere": func(s *client.Saved) { s.AuthServer.TokenEndpoint = "http://evil.example/token" },
		"no token endpoint":             func(s *client.Saved) { s.AuthServer.TokenEndpoint = "" },
		"resource of another origin":    func(s *client.Saved) { s.Resource = "https://evil.example/mcp" },
		"no client id":                  func(s *client.Saved) { s.Client.ID = "" },
	} {
		s2 := s
		edit(&s2)
		if _, _, err := client.Restore(cfg, s2); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%#v", s), fmt.Sprintf("%v", &s)} {
		if strings.Contains(out, "client-secret-s3") {
			t.Errorf("printed: %s", out)
		}
	}
}
