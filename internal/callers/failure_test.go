package callers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestFailureBodies(t *testing.T) {
	for _, tt := range []struct {
		f      *Failure
		status int
		code   int
		msg    string
	}{
		{unauthorized(RefusedUnknown), 401, -32001, "Unauthorized: a valid mcpgate API key is required"},
		{forbiddenAddress(), 403, -32003, "API key is not allowed from this address."},
		{rateLimited(3), 429, -32029, "Too Many Requests: rate limit exceeded for this API key"},
		{unavailable(), 503, -32603, "Service Unavailable: the API key could not be checked; try again"},
		{CheckClient(httptest.NewRequest("GET", "/", nil), "X-Client", []string{"a"}), 403, -32600, "Client application not allowed"},
	} {
		var body struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(tt.f.Body, &body); err != nil {
			t.Errorf("body %s: %v", tt.f.Body, err)
			continue
		}
		if tt.f.Status != tt.status || body.JSONRPC != "2.0" || string(body.ID) != "null" || body.Error.Code != tt.code || body.Error.Message != tt.msg {
			t.Errorf("failure %d %s; want %d with code %d %q", tt.f.Status, tt.f.Body, tt.status, tt.code, tt.msg)
		}

		w := httptest.NewRecorder()
		w.Header().Set("Content-Type", "text/plain")
		tt.f.Write(w)
		if w.Code != tt.status || w.Body.String() != string(tt.f.Body) || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("written: %d %q %s", w.Code, w.Header().Get("Content-Type"), w.Body)
		}
		for k, v := range tt.f.Header {
			if got := w.Header().Values(k); len(got) != len(v) || got[0] != v[0] {
				t.Errorf("written header %s = %v, want %v", k, got, v)
			}
		}
	}
	if got := rateLimited(7).Header.Get("Retry-After"); got != "7" {
		t.Errorf("Retry-After = %q, want 7", got)
	}
}

// TestFailuresAreFresh: a caller may change the Failure it got without
// changing the next one.
func TestFailuresAreFresh(t *testing.T) {
	f := unauthorized(RefusedUnknown)
	f.Header.Set("WWW-Authenticate", "changed")
	f.Body[0] = 'X'
	g := unauthorized(RefusedUnknown)
	if g.Header.Get("WWW-Authenticate") != `Bearer realm="mcpgate"` || g.Body[0] != '{' {
		t.Errorf("unauthorized() shares state between calls: %v %s", g.Header, g.Body)
	}
}

func TestCheckClient(t *testing.T) {
	allowed := []string{"claude-code", "Cursor"}
	for _, tt := range []struct {
		name   string
		header string
		values []string
		sent   []string // header values sent as X-Client-App
		ok     bool
	}{
		{"no allowlist", "", nil, nil, true},
		{"no allowlist, header sent", "", allowed, []string{"evil"}, true},
		{"allowed", "X-Client-App", allowed, []string{"claude-code"}, true},
		{"case-insensitive", "X-Client-App", allowed, []string{"CURSOR"}, true},
		{"whitespace", "X-Client-App", allowed, []string{" cursor "}, true},
		{"header name case-insensitive", "x-client-app", allowed, []string{"cursor"}, true},
		{"missing", "X-Client-App", allowed, nil, false},
		{"empty", "X-Client-App", allowed, []string{""}, false},
		{"other", "X-Client-App", allowed, []string{"curl"}, false},
		{"prefix only", "X-Client-App", allowed, []string{"claude"}, false},
		{"no values admit nobody", "X-Client-App", nil, []string{"claude-code"}, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		for _, v := range tt.sent {
			r.Header.Add("X-Client-App", v)
		}
		f := CheckClient(r, tt.header, tt.values)
		if tt.ok != (f == nil) {
			t.Errorf("%s: CheckClient = %+v; want ok=%v", tt.name, f, tt.ok)
			continue
		}
		if f != nil && (f.Status != http.StatusForbidden || string(f.Body) != `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Client application not allowed"}}`) {
			t.Errorf("%s: %d %s", tt.name, f.Status, f.Body)
		}
	}
}

func TestStripCredentials(t *testing.T) {
	for _, tt := range []struct {
		name     string
		c        *Caller
		wantAuth string
	}{
		{"nil caller", nil, "Bearer up"},
		{"key in the gateway header", &Caller{Alias: "a"}, "Bearer up"},
		{"key in Authorization", &Caller{Alias: "a", KeyFromAuthorization: true}, ""},
	} {
		h := http.Header{}
		h.Set(HeaderAPIKey, "mcpg_x")
		h.Set("Authorization", "Bearer up")
		h.Set("Accept", "application/json")
		StripCredentials(h, tt.c)
		if h.Get(HeaderAPIKey) != "" || h.Get("Authorization") != tt.wantAuth || h.Get("Accept") == "" {
			t.Errorf("%s: headers after StripCredentials: %v", tt.name, h)
		}
	}
}
