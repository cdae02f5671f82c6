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
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// open sends one request on the session, with the extra headers hdr, and
// returns the reply unread, for a stream read as it comes; id is the
// request's JSON-RPC id. method "" sends a GET (a resumed stream, with
// Last-Event-ID in hdr) instead of a POST.
func (s *rawSession) open(ctx context.Context, method string, params any, hdr map[string]string) (resp *http.Response, id int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if method != "" {
		id = s.nextID.Add(1)
		msg := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
		if params != nil {
			msg["params"] = params
		}
		body, _ := json.Marshal(msg)
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
	}
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("X-Mcpgate-Api-Key", s.key)
	if s.Pin != "" {
		req.Header.Set(HeaderPin, s.Pin)
	}
	if s.sid != "" {
		req.Header.Set("Mcp-Session-Id", s.sid)
		req.Header.Set("Mcp-Protocol-Version", revStateful)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err = s.hc.Do(req)
	return resp, id, err
}

// sseEvent is one event of an SSE stream.
type sseEvent struct {
	ID   string
	Data string
	At   time.Time // when it was read
}

// sseReader reads an SSE stream an event at a time, as it arrives.
type sseReader struct{ sc *bufio.Scanner }

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	return &sseReader{sc: sc}
}

// next returns the next event; io.EOF when the stream ended.
func (r *sseReader) next() (sseEvent, error) {
	var (
		ev   sseEvent
		data []string
		seen bool
	)
	for r.sc.Scan() {
		line := r.sc.Text()
		if line == "" {
			if seen {
				ev.Data, ev.At = strings.Join(data, "\n"), time.Now()
				return ev, nil
			}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment (keep-alive)
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		seen = true
		switch field {
		case "id":
			ev.ID = value
		case "data":
			data = append(data, value)
		}
	}
	if err := r.sc.Err(); err != nil {
		return ev, err
	}
	return ev, io.EOF
}

// streamMsg is what a stream's event carries: a progress notification or
// the call's response.
type streamMsg struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		ProgressToken any     `json:"progressToken"`
		Progress      float64 `json:"progress"`
		Total         float64 `json:"total"`
	} `json:"params"`
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error json.RawMessage `json:"error"`
}

// eventIDRE is a resumable stream's event id: <stream>-<n>.
var eventIDRE = regexp.MustCompile(`^(.+)-([0-9]+)$`)

// testResumeOnAnotherReplica: scenario 3. A session's tools/call of a
// long-running operation (progress every 0.3 s) is POSTed to replica a;
// the client reads two progress events, drops the connection, waits (so
// at least one event is sent while nobody reads) and resumes with GET and
// Last-Event-ID on replica b. b gives the remaining progress events, each
// once, then the call's result, and ends the stream: over both streams
// every progress value 1..steps exactly once, in order, under event ids of
// one stream, increasing.
func testResumeOnAnotherReplica(t *testing.T, f *Fleet) {
	needNode(t)
	const (
		steps    = 6
		duration = 1.8 // seconds
		before   = 2   // progress events read before the drop
	)
	a, b := f.Replicas[0].Name, f.Replicas[1].Name
	f.LB.Route(f.LB.pinByHeader)
	defer f.LB.Route(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Its own client: the dropped POST's connection is not reused.
	hc := &http.Client{Transport: &http.Transport{}}
	s, err := newRawSession(ctx, hc, f.LB.URL+"/mcp", streamKey)
	if err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("resume-%d", time.Now().UnixNano())
	postCtx, drop := context.WithCancel(ctx)
	defer drop()
	resp, callID, err := s.open(postCtx, "tools/call", map[string]any{
		"name":      "everything__trigger-long-running-operation",
		"arguments": map[string]any{"duration": duration, "steps": steps},
		"_meta":     map[string]any{"progressToken": token},
	}, map[string]string{HeaderPin: a})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(HeaderReplica); got != a || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("the POST: %d %s from %q: %.500s; want an SSE stream from %s", resp.StatusCode, resp.Header.Get("Content-Type"), got, body, a)
	}

	var (
		ids      []string  // every event id, both streams
		progress []float64 // progress values, both streams
		result   *streamMsg
		stream   string // the <stream> part of the ids
		lastN    = -1
	)
	// take checks one event and records it; it reports the call's
	// response.
	take := func(where string, ev sseEvent) bool {
		t.Helper()
		if ev.Data == "" {
			return false // a priming event, or a retry hint
		}
		m := eventIDRE.FindStringSubmatch(ev.ID)
		if m == nil {
			t.Fatalf("%s: event id %q is not <stream>-<n>: %.300s", where, ev.ID, ev.Data)
		}
		n, _ := strconv.Atoi(m[2])
		if stream == "" {
			stream = m[1]
		}
		if m[1] != stream || n <= lastN {
			t.Errorf("%s: event id %q after %s-%d: want ids of one stream, increasing", where, ev.ID, stream, lastN)
		}
		if slices.Contains(ids, ev.ID) {
			t.Errorf("%s: event %q delivered twice", where, ev.ID)
		}
		ids, lastN = append(ids, ev.ID), n
		var msg streamMsg
		if err := json.Unmarshal([]byte(ev.Data), &msg); err != nil {
			t.Fatalf("%s: event %s: %v: %.300s", where, ev.ID, err, ev.Data)
		}
		switch {
		case msg.Method == "notifications/progress":
			if fmt.Sprint(msg.Params.ProgressToken) != token || msg.Params.Total != steps {
				t.Errorf("%s: progress %s for token %v of %v, want token %s of %d", where, ev.ID, msg.Params.ProgressToken, msg.Params.Total, token, steps)
			}
			progress = append(progress, msg.Params.Progress)
		case string(msg.ID) == strconv.FormatInt(callID, 10):
			result = &msg
			return true
		default:
			t.Logf("%s: event %s: %.200s", where, ev.ID, ev.Data)
		}
		return false
	}

	posted := newSSEReader(resp.Body)
	for len(progress) < before {
		ev, err := posted.next()
		if err != nil {
			t.Fatalf("the POST's stream ended after %d progress events: %v", len(progress), err)
		}
		if take("POST on "+a, ev) {
			t.Fatalf("the call ended before the drop (%d progress events)", len(progress))
		}
	}
	last := ids[len(ids)-1]
	drop()
	resp.Body.Close()
	dropped := time.Now()
	time.Sleep(400 * time.Millisecond) // more than a step: at least one event is sent to nobody

	g, _, err := s.open(ctx, "", nil, map[string]string{HeaderPin: b, "Last-Event-ID": last})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Body.Close()
	resumedAt := time.Now()
	if got := g.Header.Get(HeaderReplica); got != b || g.StatusCode != http.StatusOK || !strings.HasPrefix(g.Header.Get("Content-Type"), "text/event-stream") {
		body, _ := io.ReadAll(g.Body)
		t.Fatalf("GET with Last-Event-ID %s: %d %s from %q: %.500s; want an SSE stream from %s", last, g.StatusCode, g.Header.Get("Content-Type"), got, body, b)
	}
	resumed := newSSEReader(g.Body)
	var firstAt time.Time
	atOnce := 0 // events read within 50 ms of the GET's answer: from the buffer
	for result == nil {
		ev, err := resumed.next()
		if err != nil {
			t.Fatalf("the resumed stream ended before the result (%d progress events in all: %v): %v", len(progress), progress, err)
		}
		if firstAt.IsZero() && ev.Data != "" {
			firstAt = ev.At
		}
		if ev.Data != "" && ev.At.Sub(resumedAt) < 50*time.Millisecond {
			atOnce++
		}
		take("GET on "+b, ev)
	}
	// The stream ends after the result: nothing more, no duplicate.
	endCh := make(chan error, 1)
	go func() {
		for {
			ev, err := resumed.next()
			if err != nil {
				endCh <- err
				return
			}
			if ev.Data != "" {
				endCh <- fmt.Errorf("event %q after the result: %.200s", ev.ID, ev.Data)
				return
			}
		}
	}()
	select {
	case err := <-endCh:
		if !errors.Is(err, io.EOF) {
			t.Errorf("after the result: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("the resumed stream did not end within 5s of the result")
	}

	want := make([]float64, steps)
	for i := range want {
		want[i] = float64(i + 1)
	}
	if !slices.Equal(progress, want) {
		t.Errorf("progress values over both streams %v, want %v (each once, in order)", progress, want)
	}
	if result.Error != nil || result.Result == nil || len(result.Result.Content) == 0 ||
		result.Result.Content[0].Text != fmt.Sprintf("Long running operation completed. Duration: %v seconds, Steps: %d.", duration, steps) {
		t.Errorf("the call's response: %+v %s", result.Result, result.Error)
	}
	t.Logf("POST on %s: %d events (last %s); dropped; GET on %s %v later: first event after %v, %d at once, %d events in all, ids %v",
		a, before, last, b, resumedAt.Sub(dropped).Round(time.Millisecond), firstAt.Sub(resumedAt).Round(time.Microsecond), atOnce, len(ids), ids)
}
