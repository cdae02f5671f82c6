package security

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// TestASTokenForTheSSEEndpoint (issue 24 §2.1): the legacy endpoint /sse
// announces the resource <base>/sse, a prefix of its URL, as mcp-remote
// and the Inspector require; the built-in authorization server issues a
// token for it, bound to it alone, which opens the /sse stream and no
// other route nor the admin API.
func TestASTokenForTheSSEEndpoint(t *testing.T) {
	f := newASFixture(t)
	before := adminKeyAliases(t, f.g)
	b := newASBrowser(t, f.g)
	c := b.register(t, "mcp-remote")
	tok := b.login(t, c, asBase+"/sse", opsKey)
	if aud := jwtAudience(t, tok.AccessToken); !slices.Equal(aud, []string{asBase + "/sse"}) {
		t.Errorf("aud %q, want [%s/sse]", aud, asBase)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.g.base+"/sse", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /sse with the /sse token: %d", resp.StatusCode)
	}
	if ev, err := jsonrpc.NewSSEReader(resp.Body, 1<<20).Next(); err != nil || ev.Name != "endpoint" {
		t.Errorf("GET /sse with the /sse token: first event %+v, %v", ev, err)
	}
	worksAtMostOn(t, f.g, "the /sse token", tok.AccessToken, false)
	keysUntouched(t, f.g, before)
}
