package echoserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func call(t *testing.T, url, body string) (*http.Response, rpcResponse) {
	t.Helper()
	resp, b := post(t, url, body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d, body %s", body, resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json", ct)
	}
	var r rpcResponse
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if r.JSONRPC != "2.0" {
		t.Errorf("jsonrpc = %q", r.JSONRPC)
	}
	return resp, r
}

func TestRoundTrip(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	url := srv.URL + "/mcp"

	// initialize
	resp, r := call(t, url, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
	if resp.Header.Get("Mcp-Session-Id") == "" {
		t.Error("initialize: no Mcp-Session-Id")
	}
	if string(r.ID) != "1" || r.Error != nil {
		t.Fatalf("initialize: id %s error %v", r.ID, r.Error)
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
		Capabilities    struct {
			Tools *struct{} `json:"tools"`
		} `json:"capabilities"`
		ServerInfo struct {
			Name string `json:"name"`
		} `json:"serverInfo"`
	}
	if err := json.Unmarshal(r.Result, &init); err != nil {
		t.Fatal(err)
	}
	if init.ProtocolVersion != "2025-06-18" || init.Capabilities.Tools == nil || init.ServerInfo.Name != "echo" {
		t.Errorf("initialize result = %s", r.Result)
	}

	// notifications/initialized
	hresp, b := post(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if hresp.StatusCode != http.StatusAccepted || len(b) != 0 {
		t.Errorf("notifications/initialized: status %d body %q", hresp.StatusCode, b)
	}

	// ping
	if _, r := call(t, url, `{"jsonrpc":"2.0","id":"p","method":"ping"}`); string(r.Result) != "{}" || string(r.ID) != `"p"` {
		t.Errorf("ping: %+v", r)
	}

	// tools/list
	_, r = call(t, url, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(r.Result, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 || list.Tools[0].Name != "echo" || list.Tools[0].InputSchema["type"] != "object" {
		t.Errorf("tools/list = %s", r.Result)
	}

	// tools/call
	for _, text := range []string{"hello", `quote " and \ and <tag> and ünïcödé`, ""} {
		args, _ := json.Marshal(map[string]any{"name": "echo", "arguments": map[string]string{"text": text}})
		_, r = call(t, url, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":`+string(args)+`}`)
		var res struct {
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
			IsError bool `json:"isError"`
		}
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		if res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != text {
			t.Errorf("tools/call echo %q = %s", text, r.Result)
		}
	}

	// DELETE
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	dresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dresp.Body.Close()
	if dresp.StatusCode != http.StatusOK {
		t.Errorf("DELETE: status %d", dresp.StatusCode)
	}
}

func TestErrors(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	url := srv.URL + "/mcp"

	_, r := call(t, url, `{"jsonrpc":"2.0","id":7,"method":"resources/list"}`)
	if r.Error == nil || r.Error.Code != CodeMethodNotFound || string(r.ID) != "7" {
		t.Errorf("unknown method: %+v", r)
	}
	_, r = call(t, url, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	if r.Error == nil || r.Error.Code != CodeInvalidParams {
		t.Errorf("unknown tool: %+v", r)
	}
	_, r = call(t, url, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	if r.Error != nil || !strings.Contains(string(r.Result), `"isError":true`) {
		t.Errorf("missing text: %s", r.Result)
	}
	resp, b := post(t, url, `{not json`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "-32700") {
		t.Errorf("bad json: %d %s", resp.StatusCode, b)
	}
}

func TestNegotiateVersion(t *testing.T) {
	for in, want := range map[string]string{
		"2024-11-05": "2024-11-05",
		"2025-03-26": "2025-03-26",
		"2025-06-18": "2025-06-18",
		"2025-11-25": "2025-11-25",
		"1999-01-01": "2025-11-25",
		"":           "2025-11-25",
	} {
		if got := NegotiateVersion(in); got != want {
			t.Errorf("NegotiateVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBatch(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	_, b := post(t, srv.URL, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}]`)
	var rs []rpcResponse
	if err := json.Unmarshal(b, &rs); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if len(rs) != 2 || string(rs[0].ID) != "1" || string(rs[1].ID) != "2" {
		t.Errorf("batch = %s", b)
	}
}

func BenchmarkToolsCall(b *testing.B) {
	h := Handler()
	body := `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world"}}}`
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}

func TestWrongShape(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	_, r := call(t, srv.URL, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":12}}}`)
	if r.Error == nil || r.Error.Code != CodeInvalidParams || string(r.ID) != "5" {
		t.Errorf("text as number: %+v", r)
	}
}
