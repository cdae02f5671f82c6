package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// A key's budget (issue 17 §4): calls are priced by the server's costs;
// once the period's spending reaches the budget, tools/call gets 429 with
// Retry-After and a message naming the budget, while listing still works
// and another key is unaffected. An admin-API key takes a budget too.
func TestKeyBudget(t *testing.T) {
	clearAdminEnv(t)
	up := newBYOKUpstream(t)
	const (
		master = "master-key-0123456789abcdef"
		capped = "capped-key-0123456789abcdef"
		free   = "free-key-0123456789abcdefgh"
	)
	cfg := &config.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), ToolNameSeparator: "__",
		Auth: &config.CallerAuth{MasterKey: master, Keys: []config.KeyConfig{
			{Alias: "capped", Key: capped, Budget: &config.Budget{Amount: 2, Period: "day"}},
			{Alias: "free", Key: free},
		}},
		Servers: map[string]*config.Server{
			"paid": {Name: "paid", Transport: config.TransportHTTP, URL: up.URL + "/mcp", Timeout: 5 * time.Second, ProtocolVersion: "2025-06-18",
				Tools: &config.ToolPolicy{Costs: map[string]float64{"*": 1}}},
		}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	stk, err := build(context.Background(), cfg, slog.New(slog.DiscardHandler), cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.close(context.Background())
	hs := httptest.NewServer(stk.handler)
	defer hs.Close()

	call := func(key string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"paid__whoami","arguments":{}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("X-Mcpgate-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, resp.Header, b.String()
	}
	for i := range 2 {
		if code, _, body := call(capped); code != 200 || !strings.Contains(body, `"result"`) {
			t.Fatalf("call %d within the budget: %d %s", i+1, code, body)
		}
	}
	code, hdr, body := call(capped)
	if code != http.StatusTooManyRequests || !strings.Contains(body, "Budget exceeded: key capped has spent 2 of its daily budget of 2") || !strings.Contains(body, `"id":7`) {
		t.Fatalf("past the budget: %d %s", code, body)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 || ra > 86401 {
		t.Errorf("Retry-After %q", hdr.Get("Retry-After"))
	}
	if code, body := rest(t, "POST", hs.URL+"/mcp", capped, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); code != 200 || !strings.Contains(body, "paid__whoami") {
		t.Errorf("listing past the budget: %d %s", code, body)
	}
	for range 3 {
		if code, _, body := call(free); code != 200 {
			t.Errorf("a key without a budget: %d %s", code, body)
		}
	}
	// Admin-API keys take a budget, shown in the key's view.
	code2, body2 := rest(t, "POST", hs.URL+"/admin/v1/keys", master, `{"alias":"bot","budget":{"amount":0.5,"period":"week"}}`)
	if code2 != 201 {
		t.Fatalf("create key with a budget: %d %s", code2, body2)
	}
	if code, body := rest(t, "GET", hs.URL+"/admin/v1/keys/bot", master, ""); code != 200 || !strings.Contains(body, `"budget":{"amount":0.5,"period":"week"}`) {
		t.Errorf("key view: %d %s", code, body)
	}
	if code, body := rest(t, "POST", hs.URL+"/admin/v1/keys", master, `{"alias":"bad","budget":{"amount":1,"period":"year"}}`); code != 400 || !strings.Contains(body, "budget.period") {
		t.Errorf("a bad period: %d %s", code, body)
	}
}
