package callers

import (
	"context"
	"encoding/base64"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// tableTokens verifies tokens from a table; it records the resources.
type tableTokens struct {
	ids  map[string]*oauth.Identity
	seen []string
}

func (tt *tableTokens) Verify(_ context.Context, token, resource string) (*oauth.Identity, error) {
	tt.seen = append(tt.seen, resource)
	if id, ok := tt.ids[token]; ok {
		cp := *id
		return &cp, nil
	}
	return nil, &oauth.TokenError{Description: "signature is not valid"}
}

func jwtLike(name string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"ES256","typ":"JWT"}`)) + "." + enc([]byte(`{"sub":"`+name+`"}`)) + ".c2ln"
}

// The union of the grants a person matches: servers add up (absent means
// all), a server's tools stay limited only when every grant that grants it
// limits them, a tool is denied only when every such grant denies it, the
// lowest non-zero rate limit applies; no grant, no server.
func TestFromGrants(t *testing.T) {
	grants := []config.Grant{
		{Team: "platform", Servers: []string{"calc"}, Tools: map[string][]string{"calc": {"add"}}, DenyTools: map[string][]string{"calc": {"drop"}}, RateLimitRPM: 100},
		{Role: "ops", Servers: []string{"calc", "notes"}, Tools: map[string][]string{"calc": {"sub"}}, DenyTools: map[string][]string{"calc": {"drop", "wipe"}}, RateLimitRPM: 50, Toolsets: []string{"support"}},
		{User: "root", Admin: true},
	}
	for _, tc := range []struct {
		name string
		s    Subject
		want Caller
	}{
		{"nobody", Subject{User: "x"}, Caller{Servers: []string{}}},
		{"team", Subject{User: "ann", Teams: []string{"platform"}},
			Caller{Servers: []string{"calc"}, Tools: map[string][]string{"calc": {"add"}}, DenyTools: map[string][]string{"calc": {"drop"}}, RateLimitRPM: 100}},
		{"team and role", Subject{User: "ann", Teams: []string{"platform"}, Roles: []string{"ops"}},
			Caller{Servers: []string{"calc", "notes"}, Tools: map[string][]string{"calc": {"add", "sub"}}, DenyTools: map[string][]string{"calc": {"drop"}}, Toolsets: []string{"support"}, RateLimitRPM: 50}},
		{"a grant of everything", Subject{User: "root", Teams: []string{"platform"}},
			Caller{Servers: nil, DenyTools: nil, Admin: true, RateLimitRPM: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := FromGrants(grants, tc.s)
			if diff := cmp.Diff(got, tc.want, cmp.AllowUnexported(Caller{})); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

// A JWT bearer is verified for the request's resource; the caller is its
// person with the grants' access, owned by issuer and subject (so two
// tokens of one person share an owner), and the token is not forwarded.
// A stream of a key login ends with the key; a JWT caller's outlives its
// access token (each POST is judged with a current one).
func TestJWTCaller(t *testing.T) {
	st := openStore(t)
	clk := newFakeClock()
	addKey(t, st, store.Key{Alias: "bot", Servers: []string{"notes"}})
	exp := clk.Now().Add(10 * time.Minute)
	tokens := &tableTokens{ids: map[string]*oauth.Identity{
		jwtLike("a1"):  {Issuer: "https://idp", Subject: "s-ann", User: "ann", Teams: []string{"platform"}, Expiry: exp},
		jwtLike("a2"):  {Issuer: "https://idp", Subject: "s-ann", User: "ann", Teams: []string{"platform"}, Expiry: exp},
		jwtLike("bob"): {Issuer: "https://idp", Subject: "s-bob", User: "bob", Expiry: exp},
		jwtLike("key"): {Issuer: "https://gw", Subject: "key:bot", User: "key:bot", Key: "bot", Expiry: exp},
	}}
	a := newAuth(t, Options{Keys: st, Tokens: tokens, Now: clk.Now, CacheTTL: -1,
		Grants: []config.Grant{{Team: "platform", Servers: []string{"calc"}}}})
	req := func(tok string) *http.Request {
		r := request(remote, "Authorization", "Bearer "+tok)
		return r.WithContext(WithResource(r.Context(), "https://gw/mcp"))
	}
	ann := mustAuth(t, a, req(jwtLike("a1")))
	if ann.User != "ann" || ann.Issuer != "https://idp" || !cmp.Equal(ann.Servers, []string{"calc"}) || !ann.KeyFromAuthorization || ann.Team != "platform" {
		t.Errorf("ann: %+v", ann)
	}
	if again := mustAuth(t, a, req(jwtLike("a2"))); again.Owner != ann.Owner || ann.Owner[:5] != OwnerOIDC {
		t.Errorf("owners %q and %q, want one oidc: owner", ann.Owner, again.Owner)
	}
	if bob := mustAuth(t, a, req(jwtLike("bob"))); bob.Owner == ann.Owner || len(bob.Servers) != 0 || bob.Servers == nil {
		t.Errorf("bob: %+v", bob)
	}
	if tokens.seen[0] != "https://gw/mcp" {
		t.Errorf("verified for %q", tokens.seen[0])
	}
	w := mustFail(t, a, req(jwtLike("forged")))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("forged: %d", w.Code)
	}
	bot := mustAuth(t, a, req(jwtLike("key")))
	if bot.Alias != "bot" || !cmp.Equal(bot.Servers, []string{"notes"}) || bot.Owner[:5] != OwnerOIDC {
		t.Errorf("key login: %+v", bot)
	}

	ctx := context.Background()
	if !a.StillValid(ctx, ann) || !a.StillValid(ctx, bot) {
		t.Fatal("valid callers reported invalid")
	}
	if err := st.DeleteKey(ctx, "bot"); err != nil {
		t.Fatal(err)
	}
	if a.StillValid(ctx, bot) {
		t.Error("a key login is still valid after its key was deleted")
	}
	if f := mustFail(t, a, req(jwtLike("key"))); f.Code != http.StatusUnauthorized {
		t.Errorf("key login after the key was deleted: %d", f.Code)
	}
	clk.Advance(11*time.Minute + config.DefaultClockSkew)
	if !a.StillValid(ctx, ann) {
		t.Error("a JWT caller's stream was cut when its access token expired")
	}
}

// countingAliases counts the store reads of key logins.
type countingAliases struct {
	*sqlite.Store
	n atomic.Int32
}

func (c *countingAliases) GetKeyByAlias(ctx context.Context, alias string) (store.Key, error) {
	c.n.Add(1)
	return c.Store.GetKeyByAlias(ctx, alias)
}

// A key login's tokens are served from the key cache like the key itself:
// one store read for many requests, and an invalidation (the admin API's,
// on revoking the key) takes effect on the next one.
func TestKeyLoginIsCached(t *testing.T) {
	st := &countingAliases{Store: openStore(t)}
	addKey(t, st, store.Key{Alias: "bot", Servers: []string{"notes"}})
	clk := newFakeClock()
	tokens := &tableTokens{ids: map[string]*oauth.Identity{
		jwtLike("key"): {Issuer: "https://gw", Subject: "key:bot", User: "key:bot", Key: "bot", Expiry: clk.Now().Add(time.Hour)},
	}}
	a := newAuth(t, Options{Keys: st, Tokens: tokens, Now: clk.Now, CacheTTL: time.Minute})
	r := request(remote, "Authorization", "Bearer "+jwtLike("key"))
	for range 5 {
		if c := mustAuth(t, a, r); c.Alias != "bot" {
			t.Fatalf("caller %+v", c)
		}
	}
	if n := st.n.Load(); n != 1 {
		t.Errorf("%d store reads for 5 requests, want 1", n)
	}
	if err := st.DeleteKey(context.Background(), "bot"); err != nil {
		t.Fatal(err)
	}
	a.Invalidate("bot")
	if w := mustFail(t, a, r); w.Code != http.StatusUnauthorized {
		t.Errorf("after revocation: %d", w.Code)
	}
}

// WithResourceFunc: a bearer token is verified for the resource the
// function gives, and a key caller never asks for it.
func TestResourceWorkedOutOnlyForTokens(t *testing.T) {
	st := openStore(t)
	secret := addKey(t, st, store.Key{Alias: "bot"})
	exp := time.Now().Add(10 * time.Minute)
	tokens := &tableTokens{ids: map[string]*oauth.Identity{
		jwtLike("a1"): {Issuer: "https://idp", Subject: "s-ann", User: "ann", Expiry: exp},
	}}
	a := newAuth(t, Options{Keys: st, Tokens: tokens, CacheTTL: -1})
	asked := 0
	req := func(name, value string) *http.Request {
		r := request(remote, name, value)
		return r.WithContext(WithResourceFunc(r.Context(), func() string { asked++; return "https://gw/mcp/alpha" }))
	}
	mustAuth(t, a, req("X-Mcpgate-Api-Key", secret))
	if asked != 0 {
		t.Fatalf("a key caller worked out the resource %d times", asked)
	}
	mustAuth(t, a, req("Authorization", "Bearer "+jwtLike("a1")))
	if asked != 1 || len(tokens.seen) != 1 || tokens.seen[0] != "https://gw/mcp/alpha" {
		t.Fatalf("a token was verified for %v (asked %d times)", tokens.seen, asked)
	}
}
