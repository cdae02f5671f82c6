package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Protocol revisions the scenarios speak: the stateful one (sessions,
// Mcp-Session-Id) and the stateless one go-sdk speaks by default.
const (
	revStateful  = "2025-11-25"
	revStateless = "2026-07-28"
)

// probeClient is for /readyz and /metrics: short timeouts, no keep-alive
// surprises after a kill.
var probeClient = &http.Client{Timeout: 2 * time.Second}

// Ready returns the status and body of the replica's /readyz as an
// anonymous probe sees it (0 when it does not answer).
func (r *Replica) Ready() (int, string) { return r.ready("") }

// ReadyDetails is Ready with the master key: the details (the state
// backend's driver and last error) are an administrator's.
func (r *Replica) ReadyDetails() (int, string) { return r.ready(masterKey) }

func (r *Replica) ready(key string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, r.URL+"/readyz", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Metric returns the value of the unlabelled metric name on the replica's
// /metrics, or "" when it has none.
func (r *Replica) Metric(t testing.TB, name string) string {
	t.Helper()
	resp, err := probeClient.Get(r.URL + "/metrics")
	if err != nil {
		t.Fatalf("replica %s /metrics: %v", r.Name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// keyTransport adds a gateway key to every request of an SDK client.
type keyTransport struct {
	key  string
	base http.RoundTripper
}

func (k keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Mcpgate-Api-Key", k.key)
	return k.base.RoundTrip(r)
}

// sdkConnect connects the official go-sdk client, unmodified, to endpoint
// with key, speaking rev ("" for the SDK's default, the stateless
// 2026-07-28).
func sdkConnect(t testing.TB, ctx context.Context, endpoint, key, rev string) *mcp.ClientSession {
	t.Helper()
	return sdkConnectWith(t, ctx, endpoint, key, rev, nil)
}

// sdkConnectWith is sdkConnect with client options (handlers).
func sdkConnectWith(t testing.TB, ctx context.Context, endpoint, key, rev string, o *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "fleet-proof", Version: "1"}, o)
	tr := &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: keyTransport{key: key, base: http.DefaultTransport}}}
	var opts *mcp.ClientSessionOptions
	if rev != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: rev}
	}
	cs, err := client.Connect(ctx, tr, opts)
	if err != nil {
		t.Fatalf("connect %s: %v", endpoint, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// rawSession is a stateful MCP session spoken as raw JSON-RPC over HTTP:
// for load, where each reply's status and serving replica matter and a
// failed call must not end the session on the client's side (the SDK
// gives up a session after a transport error).
type rawSession struct {
	url, key string
	hc       *http.Client
	sid      string // Mcp-Session-Id
	// InitOn is the replica that served initialize.
	InitOn string
	// Pin, when set, asks the balancer to send the session's requests to
	// that replica (pinByHeader).
	Pin    string
	nextID atomic.Int64
}

// rpcReply is one JSON-RPC reply and where it came from.
type rpcReply struct {
	Status  int
	Replica string // HeaderReplica
	Result  json.RawMessage
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	Body string
}

// OK reports a 200 with a result that is not a tool error.
func (r *rpcReply) OK() bool {
	if r.Status != http.StatusOK || r.Error != nil || r.Result == nil {
		return false
	}
	var res struct {
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(r.Result, &res)
	return !res.IsError
}

func (r *rpcReply) String() string {
	return fmt.Sprintf("HTTP %d from %q: %.300s", r.Status, r.Replica, r.Body)
}

// newRawSession initializes a session at url (the balancer's /mcp, or a
// replica's) with key.
func newRawSession(ctx context.Context, hc *http.Client, url, key string) (*rawSession, error) {
	s := &rawSession{url: url, key: key, hc: hc}
	rep, err := s.post(ctx, "initialize", map[string]any{
		"protocolVersion": revStateful,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "fleet-load", "version": "1"},
	}, false)
	if err != nil {
		return nil, err
	}
	if !rep.OK() || s.sid == "" {
		return nil, fmt.Errorf("initialize: %v (session id %q)", rep, s.sid)
	}
	s.InitOn = rep.Replica
	if rep, err := s.post(ctx, "notifications/initialized", nil, true); err != nil {
		return nil, err
	} else if rep.Status != http.StatusAccepted {
		return nil, fmt.Errorf("notifications/initialized: %v", rep)
	}
	return s, nil
}

// statelessClient is a rawSession without a session: each request stands
// alone (the gateway serves a request without Mcp-Session-Id statelessly).
func statelessClient(hc *http.Client, url, key string) *rawSession {
	return &rawSession{url: url, key: key, hc: hc}
}

// ID is the session's Mcp-Session-Id.
func (s *rawSession) ID() string { return s.sid }

// Request sends one request on the session.
func (s *rawSession) Request(ctx context.Context, method string, params any) (*rpcReply, error) {
	return s.post(ctx, method, params, false)
}

// Call calls a tool on the session.
func (s *rawSession) Call(ctx context.Context, tool string, args map[string]any) (*rpcReply, error) {
	return s.post(ctx, "tools/call", map[string]any{"name": tool, "arguments": args}, false)
}

// post sends one request (or a notification) and reads its reply, JSON or
// the last message of an SSE stream. An error is a transport failure.
func (s *rawSession) post(ctx context.Context, method string, params any, notification bool) (*rpcReply, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !notification {
		msg["id"] = s.nextID.Add(1)
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", s.key)
	if s.Pin != "" {
		req.Header.Set(HeaderPin, s.Pin)
	}
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("Mcp-Protocol-Version", revStateful)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read reply: %w", err)
	}
	rep := &rpcReply{Status: resp.StatusCode, Replica: resp.Header.Get(HeaderReplica), Body: string(b)}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && method == "initialize" {
		s.sid = id
	}
	data := b
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data = nil
		for line := range strings.Lines(string(b)) {
			if d, ok := strings.CutPrefix(strings.TrimRight(line, "\r\n"), "data:"); ok {
				data = []byte(strings.TrimSpace(d)) // the last message is the reply
			}
		}
	}
	if len(bytes.TrimSpace(data)) > 0 && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, rep); err != nil {
			return nil, fmt.Errorf("decode reply %.200q: %w", data, err)
		}
	}
	return rep, nil
}

// metricFloat parses a metric value; "" is an error.
func metricFloat(v string) (float64, error) {
	if v == "" {
		return 0, errors.New("no such metric")
	}
	return strconv.ParseFloat(v, 64)
}
