package gateway

// Golden protocol transcripts (STYLE 15): each flow below drives the
// gateway with raw HTTP, in front of upstreams written on raw bytes, and
// records every message the client sends, every byte of what the gateway
// answers, and every request the upstreams receive, in order, as one txtar
// archive under testdata/transcripts. The archives are the record of the
// wire: a change that moves a byte of it fails here with a diff, and is
// accepted by regenerating them:
//
//	go test ./internal/gateway -run Transcript -update
//
// What varies from run to run (session ids, the ids and progress tokens
// the gateway makes up, SSE event ids) is replaced by numbered
// placeholders in the order it first appears.

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata instead of comparing with them")

// trStatelessHeaders are the headers a 2026-07-28 client sends with method
// (and name, for tools/call).
func trStatelessHeaders(method, name string) map[string]string {
	h := map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// TestTranscript replays each main flow and compares its transcript with
// testdata/transcripts/NAME.txtar.
func TestTranscript(t *testing.T) {
	for _, tc := range []struct {
		name, about string
		flow        func(tr *transcript, a, b *wireUpstream)
	}{
		{"merged_initialize_list", `A 2025-11-25 client initializes on the merged route /mcp of two upstreams,
a and b, and lists their tools. The gateway met both upstreams when it
started (probing the 2026-07-28 revision first, which they refuse), so the
list is answered from what it holds and the upstreams receive nothing.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.upstream(a, `"tools/list"`)
				tr.upstream(b, `"tools/list"`)
				sid := tr.initialize("/mcp", `{}`, true)
				tr.post("/mcp", map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			}},
		{"call_progress_log", `A tools/call with a progress token: the upstream answers on an SSE stream
with a progress notification and a log message before the result; the
gateway gives the upstream its own progress token and relays both
notifications on the call's stream with the client's token.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.started(a, b)
				sid := tr.initialize("/mcp", `{}`, false)
				tr.post("/mcp", map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"info"}}`)
				tr.upstream(a, `"logging/setLevel"`)
				tr.upstream(b, `"logging/setLevel"`)
				s := tr.open("/mcp", map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a__work","arguments":{},"_meta":{"progressToken":"client-token"}}}`)
				tr.upstream(a, `"tools/call"`)
				s.rest()
			}},
		{"sampling_relay", `A tool asks the client for a completion (sampling/createMessage) on the
call's stream. The gateway relays the request under an id of its own, the
client answers it in a POST of its session, the gateway hands the answer
to the upstream under the upstream's id, and the call completes.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.started(a, b)
				sid := tr.initialize("/mcp", `{"sampling":{}}`, false)
				h := map[string]string{mcpwire.HeaderSessionID: sid}
				s := tr.open("/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__ask","arguments":{}}}`)
				tr.upstream(a, `"tools/call"`)
				ask := s.next()
				tr.post("/mcp", h, `{"jsonrpc":"2.0","id":`+ask.ID.Raw()+`,"result":{"role":"assistant","content":{"type":"text","text":"yes"},"model":"m"}}`)
				tr.upstream(a, `"id":"s-1"`)
				s.rest()
			}},
		{"cancellation", `The client cancels a tools/call in flight: the gateway answers the
notification with 202, tells the upstream (under the upstream's id for the
call, with its own reason), and answers the call with -32800.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.started(a, b)
				sid := tr.initialize("/mcp", `{}`, false)
				h := map[string]string{mcpwire.HeaderSessionID: sid}
				s := tr.open("/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__slow","arguments":{}}}`)
				tr.upstream(a, `"tools/call"`)
				tr.post("/mcp", h, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"changed my mind"}}`)
				tr.upstream(a, `"notifications/cancelled"`)
				s.rest()
			}},
		{"stateless_call", `A 2026-07-28 client, with no session: server/discover, then a tools/call
on the merged route. Each request carries the revision's headers and _meta;
the gateway calls the handshake-era upstream in the session it holds with it,
without the revision's _meta keys.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.started(a, b)
				tr.post("/mcp", trStatelessHeaders("server/discover", ""), `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+statelessMetaJSON+`}}`)
				s := tr.open("/mcp", trStatelessHeaders("tools/call", "b__echo"), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b__echo","arguments":{"say":"hi"},`+statelessMetaJSON+`}}`)
				tr.upstream(b, `"tools/call"`)
				s.rest()
			}},
		{"refusals", `What the gateway refuses without asking an upstream: a call to a tool no
upstream of the route has, on the merged route and on one server's route;
an answer to a request nobody sent; and a foreign answer: a second session
answering the sampling request relayed to the first, which is refused
while the first session's own answer completes its call.`,
			func(tr *transcript, a, b *wireUpstream) {
				tr.started(a, b)
				sid := tr.initialize("/mcp", `{"sampling":{}}`, false)
				h := map[string]string{mcpwire.HeaderSessionID: sid}
				tr.post("/mcp", h, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a__nope","arguments":{}}}`)
				tr.post("/mcp", h, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
				tr.post("/mcp", h, `{"jsonrpc":"2.0","id":"mcpg-elsewhere-1","result":{"role":"assistant","content":{"type":"text","text":"not yours"},"model":"m"}}`)
				one := tr.initialize("/mcp/a", `{}`, false)
				tr.post("/mcp/a", map[string]string{mcpwire.HeaderSessionID: one}, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b__echo","arguments":{}}}`)

				s := tr.open("/mcp", h, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__ask","arguments":{}}}`)
				tr.upstream(a, `"tools/call"`)
				ask := s.next()
				answer := `{"jsonrpc":"2.0","id":` + ask.ID.Raw() + `,"result":{"role":"assistant","content":{"type":"text","text":"yes"},"model":"m"}}`
				other := tr.initialize("/mcp", `{"sampling":{}}`, false)
				tr.post("/mcp", map[string]string{mcpwire.HeaderSessionID: other}, answer)
				tr.post("/mcp", h, answer)
				tr.upstream(a, `"id":"s-1"`)
				s.rest()
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newWireUpstream(t, "a"), newWireUpstream(t, "b")
			_, gw := startGateway(t, &config.Config{Servers: map[string]*config.Server{
				"a": httpServer(a.ts.URL + "/mcp"), "b": httpServer(b.ts.URL + "/mcp"),
			}})
			tr := &transcript{t: t, url: gw.URL, ups: []*wireUpstream{a, b}, norm: newTrNormalizer()}
			tc.flow(tr, a, b)
			tr.settle()
			got := tr.archive(tc.about)
			checkTranscript(t, filepath.Join("testdata", "transcripts", tc.name+".txtar"), got)
		})
	}
}

// checkTranscript compares got with the file at path, or rewrites the file
// with -update.
func checkTranscript(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(strings.Split(string(got), "\n"), strings.Split(string(want), "\n")); diff != "" {
		t.Errorf("%s differs (-got +want); if the change is meant, rerun with -update:\n%s", path, diff)
	}
}

// transcript collects one flow's sections in the order they happen.
type transcript struct {
	t     *testing.T
	url   string
	ups   []*wireUpstream
	norm  *trNormalizer
	files []txtar.File
	quiet bool // while set, client exchanges are made but not recorded
}

func (tr *transcript) add(title, content string) {
	if tr.quiet {
		return
	}
	tr.files = append(tr.files, txtar.File{Name: fmt.Sprintf("%02d %s", len(tr.files)+1, title), Data: []byte(content)})
}

// archive is the flow's transcript, normalized, as txtar.
func (tr *transcript) archive(about string) []byte {
	ar := &txtar.Archive{Comment: []byte(about + "\n")}
	for _, f := range tr.files {
		f.Name = tr.norm.apply(f.Name)
		f.Data = []byte(tr.norm.apply(string(f.Data)))
		if len(f.Data) > 0 && f.Data[len(f.Data)-1] != '\n' {
			f.Data = append(f.Data, '\n')
		}
		ar.Files = append(ar.Files, f)
	}
	return txtar.Format(ar)
}

// trHeaders renders the headers of h a transcript keeps (Mcp-*, which
// includes MCP-Protocol-Version, Allow, WWW-Authenticate and, when
// withType, Content-Type), one "Name: value" a line, sorted; the others
// (Date, Content-Length, User-Agent) vary or say nothing of the protocol.
func trHeaders(h http.Header, withType bool) string {
	var lines []string
	for k, vs := range h {
		if strings.HasPrefix(k, "Mcp-") || (withType && k == "Content-Type") || k == "Allow" || k == "Www-Authenticate" {
			for _, v := range vs {
				lines = append(lines, k+": "+v)
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// trSection is a section's text: headers, a blank line, the body.
func trSection(head, body string) string {
	if head == "" {
		return "\n" + body
	}
	return head + "\n\n" + body
}

// initialize opens a 2025-11-25 session on path with the client
// capabilities caps and returns its id; record says whether the handshake
// goes into the transcript (flows after the first skip it).
func (tr *transcript) initialize(path, caps string, record bool) string {
	tr.t.Helper()
	tr.quiet = !record
	defer func() { tr.quiet = false }()
	h := tr.post(path, nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"raw","version":"1"}}}`)
	sid := h.Get(mcpwire.HeaderSessionID)
	if sid == "" {
		tr.t.Fatal("initialize returned no session id")
	}
	tr.post(path, map[string]string{mcpwire.HeaderSessionID: sid}, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// post sends body to path and records the exchange to its end.
func (tr *transcript) post(path string, hdr map[string]string, body string) http.Header {
	tr.t.Helper()
	s := tr.open(path, hdr, body)
	s.rest()
	return s.resp.Header
}

// trStream is the gateway's answer to one POST, read as it comes.
type trStream struct {
	tr    *transcript
	path  string
	done  chan struct{} // closed when resp or err is set
	resp  *http.Response
	err   error
	began bool // the status and headers are in the transcript
	sse   bool
	br    *bufio.Reader
}

// open sends body to path and records the request; the answer is read
// with next and rest. The request is sent in the background: a gateway
// may hold back its status until the call ends, and the flow may have to
// act meanwhile (cancel the call).
func (tr *transcript) open(path string, hdr map[string]string, body string) *trStream {
	tr.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, tr.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	tr.add("client → gateway: POST "+path, trSection(trHeaders(req.Header, false), body))
	s := &trStream{tr: tr, path: path, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.resp, s.err = http.DefaultClient.Do(req)
	}()
	tr.t.Cleanup(func() {
		<-s.done
		if s.resp != nil {
			s.resp.Body.Close()
		}
	})
	return s
}

// begin waits for the status and headers of the answer and records them
// when it is a stream.
func (s *trStream) begin() {
	s.tr.t.Helper()
	if s.began {
		return
	}
	s.began = true
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.tr.t.Fatalf("POST %s: no answer within 10s", s.path)
	}
	if s.err != nil {
		s.tr.t.Fatalf("POST %s: %v", s.path, s.err)
	}
	if sid := s.resp.Header.Get(mcpwire.HeaderSessionID); sid != "" {
		s.tr.norm.literal(sid, "session")
	}
	s.br = bufio.NewReader(s.resp.Body)
	s.sse = strings.HasPrefix(s.resp.Header.Get("Content-Type"), "text/event-stream")
	if s.sse {
		s.tr.add(fmt.Sprintf("gateway → client: %d (stream opens)", s.resp.StatusCode), trHeaders(s.resp.Header, true))
	}
}

// next reads, records and returns the stream's next message.
func (s *trStream) next() *jsonrpc.Message {
	s.tr.t.Helper()
	s.begin()
	raw, m, err := s.event()
	if err != nil {
		s.tr.t.Fatalf("stream: %v", err)
	}
	s.tr.add("gateway → client: event", raw)
	return m
}

// event reads one SSE event: its raw text, and its data as a message.
func (s *trStream) event() (string, *jsonrpc.Message, error) {
	type read struct {
		raw string
		err error
	}
	done := make(chan read, 1)
	go func() {
		var b strings.Builder
		for {
			line, err := s.br.ReadString('\n')
			b.WriteString(line)
			if err != nil {
				done <- read{b.String(), err}
				return
			}
			if line == "\n" || line == "\r\n" {
				done <- read{b.String(), nil}
				return
			}
		}
	}()
	var r read
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		s.tr.t.Fatal("no event within 10s")
	}
	if r.err != nil {
		return r.raw, nil, r.err
	}
	var data []string
	for line := range strings.Lines(r.raw) {
		if d, ok := strings.CutPrefix(line, "data:"); ok {
			data = append(data, strings.TrimSpace(d))
		}
	}
	m, err := jsonrpc.Decode([]byte(strings.Join(data, "\n")))
	if err != nil {
		// Not a message (a priming event, a comment): record it as it is.
		return r.raw, nil, nil
	}
	return r.raw, m, nil
}

// rest reads and records the answer to its end.
func (s *trStream) rest() {
	s.tr.t.Helper()
	s.begin()
	if !s.sse {
		b, _ := io.ReadAll(s.br)
		s.tr.add(fmt.Sprintf("gateway → client: %d", s.resp.StatusCode), trSection(trHeaders(s.resp.Header, true), string(b)))
		return
	}
	for {
		raw, _, err := s.event()
		if errors.Is(err, io.EOF) && raw == "" {
			s.tr.add("gateway → client: stream ends", "")
			return
		}
		if err != nil {
			s.tr.t.Fatalf("stream: %v (read %q)", err, raw)
		}
		s.tr.add("gateway → client: event", raw)
	}
}

// started waits for the upstreams to be met as the gateway starts, without
// recording it (merged_initialize_list does).
func (tr *transcript) started(ups ...*wireUpstream) {
	tr.t.Helper()
	for _, u := range ups {
		u.await(tr.t, `"tools/list"`)
	}
}

// upstream waits until u has received a request whose text contains
// until, and records what it received up to that one.
func (tr *transcript) upstream(u *wireUpstream, until string) {
	tr.t.Helper()
	for _, r := range u.await(tr.t, until) {
		tr.add("gateway → upstream "+u.name+": "+r.method, trSection(r.head, r.body))
	}
}

// settle records what the upstreams received that no step waited for.
func (tr *transcript) settle() {
	for _, u := range tr.ups {
		for _, r := range u.take() {
			tr.add("gateway → upstream "+u.name+": "+r.method, trSection(r.head, r.body))
		}
	}
}

// wireUpstream is a 2025-11-25 streamable-HTTP upstream on raw bytes that
// refuses the 2026-07-28 probe and records every request it receives. Its
// tools: echo answers at once; work streams a progress notification and a
// log message before its result; ask asks the client for a completion and
// answers with it; slow waits until it is cancelled and never answers.
type wireUpstream struct {
	name    string
	ts      *httptest.Server
	answers chan *jsonrpc.Message // answers to the requests it sent
	cancels chan struct{}         // one per notifications/cancelled
	done    chan struct{}         // closed at cleanup: ends held streams

	mu     sync.Mutex // guards the fields below
	got    []trReceived
	taken  int           // got[:taken] are in the transcript
	change chan struct{} // closed and replaced when got grows
}

type trReceived struct {
	method     string // POST or GET
	head, body string
}

func newWireUpstream(t *testing.T, name string) *wireUpstream {
	u := &wireUpstream{name: name, answers: make(chan *jsonrpc.Message, 4), cancels: make(chan struct{}, 4), done: make(chan struct{}), change: make(chan struct{})}
	u.ts = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(func() {
		close(u.done)
		u.ts.Close()
	})
	return u
}

func (u *wireUpstream) record(r trReceived) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.got = append(u.got, r)
	close(u.change)
	u.change = make(chan struct{})
}

// await waits until a request containing until arrives after the ones
// already taken, and takes the requests up to it.
func (u *wireUpstream) await(t *testing.T, until string) []trReceived {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		u.mu.Lock()
		for i := u.taken; i < len(u.got); i++ {
			if strings.Contains(u.got[i].body, until) {
				out := u.got[u.taken : i+1]
				u.taken = i + 1
				u.mu.Unlock()
				return out
			}
		}
		change := u.change
		u.mu.Unlock()
		select {
		case <-change:
		case <-deadline:
			t.Fatalf("upstream %s trReceived no %s within 10s", u.name, until)
		}
	}
}

// take takes what arrived and was not taken.
func (u *wireUpstream) take() []trReceived {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := u.got[u.taken:]
	u.taken = len(u.got)
	return out
}

func (u *wireUpstream) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.record(trReceived{method: r.Method, head: trHeaders(r.Header, false), body: string(body)})
	if r.Method == http.MethodGet {
		// The standalone stream: held open, silent, until the end.
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-u.done:
		}
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	m, err := jsonrpc.Decode(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	switch {
	case m.IsResponse():
		u.answers <- m
		w.WriteHeader(http.StatusAccepted)
		return
	case !m.IsRequest():
		if m.Method == "notifications/cancelled" {
			u.cancels <- struct{}{}
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	reply := func(result string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID.Raw(), result)
	}
	switch m.Method {
	case "initialize":
		w.Header().Set(mcpwire.HeaderSessionID, "upstream-session-"+u.name)
		reply(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"logging":{}},"serverInfo":{"name":"` + u.name + `","version":"1"}}`)
	case "tools/list":
		reply(`{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"work","inputSchema":{"type":"object"}},{"name":"ask","inputSchema":{"type":"object"}},{"name":"slow","inputSchema":{"type":"object"}}]}`)
	case "logging/setLevel":
		reply(`{}`)
	case "tools/call":
		name, _ := jsonrpc.Get(m.Params, "name")
		u.call(w, r, m, strings.Trim(string(name), `"`))
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, m.ID.Raw())
	}
}

func (u *wireUpstream) call(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message, tool string) {
	if tool == "echo" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"echo from %s"}]}}`, m.ID.Raw(), u.name)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	send := func(msg string) {
		fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
		w.(http.Flusher).Flush()
	}
	result := func(text string) {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":%q}]}}`, m.ID.Raw(), text))
	}
	switch tool {
	case "work":
		tok, _ := jsonrpc.GetPath(m.Params, "_meta", "progressToken")
		send(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + string(tok) + `,"progress":1,"total":2,"message":"halfway"}}`)
		send(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","logger":"work","data":"working"}}`)
		result("worked")
	case "ask":
		send(`{"jsonrpc":"2.0","id":"s-1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"may I?"}}],"maxTokens":5}}`)
		select {
		case a := <-u.answers:
			text, _ := jsonrpc.GetPath(a.Result, "content", "text")
			result("the client said " + strings.Trim(string(text), `"`))
		case <-r.Context().Done():
		case <-u.done:
		}
	case "slow":
		w.(http.Flusher).Flush()
		select {
		case <-u.cancels:
		case <-r.Context().Done():
		case <-u.done:
		}
	}
}

// trNormalizer replaces what varies between runs with numbered
// placeholders, numbered in the order they first appear.
type trNormalizer struct {
	literals map[string]string // value → placeholder
	kinds    []struct {
		re   *regexp.Regexp
		kind string
	}
	seen  map[string]string // value → placeholder, for regexp matches
	count map[string]int    // kind → placeholders handed out
}

func newTrNormalizer() *trNormalizer {
	n := &trNormalizer{literals: map[string]string{}, seen: map[string]string{}, count: map[string]int{}}
	for _, k := range []struct{ re, kind string }{
		{`mcpg-p-[0-9a-f]+`, "progress-token"},
		{`mcpg-[0-9a-z]+-[0-9a-f]{16,}|mcpg-[0-9a-f]{16,}`, "relayed-id"},
		{`(?m)^id: .*$`, "event-id"},
	} {
		n.kinds = append(n.kinds, struct {
			re   *regexp.Regexp
			kind string
		}{regexp.MustCompile(k.re), k.kind})
	}
	return n
}

// literal marks value, seen on the wire, as one of kind.
func (n *trNormalizer) literal(value, kind string) {
	if _, ok := n.literals[value]; ok {
		return
	}
	n.count[kind]++
	n.literals[value] = fmt.Sprintf("<%s-%d>", kind, n.count[kind])
}

func (n *trNormalizer) apply(s string) string {
	for v, p := range n.literals {
		s = strings.ReplaceAll(s, v, p)
	}
	for _, k := range n.kinds {
		s = k.re.ReplaceAllStringFunc(s, func(v string) string {
			if k.kind == "event-id" {
				v = strings.TrimPrefix(v, "id: ")
			}
			p, ok := n.seen[v]
			if !ok {
				n.count[k.kind]++
				p = fmt.Sprintf("<%s-%d>", k.kind, n.count[k.kind])
				n.seen[v] = p
			}
			if k.kind == "event-id" {
				return "id: " + p
			}
			return p
		})
	}
	return s
}
