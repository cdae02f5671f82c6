// Command sessions measures what idle sessions and idle GET streams cost a
// running gateway (bench/sessions.sh starts it): it opens N stateful
// sessions (initialize + notifications/initialized), then one GET stream
// on each, and reads the gateway's memory from /proc/PID/status (and, when
// the gateway runs with GODEBUG=gctrace=1 into -gclog, the live heap the
// last collection left) before, after the sessions and after the streams.
// It reports bytes per session and per stream. Loopback only; it holds N
// connections open, so both processes need N+ file descriptors.
//
//	go run ./bench/sessions -url http://127.0.0.1:4000/mcp/echo -pid 1234 -n 10000
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sessions-bench","version":"1"}}}`
const initializedBody = `{"jsonrpc":"2.0","method":"notifications/initialized"}`

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ", ") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

func main() {
	url := flag.String("url", "", "the gateway's MCP endpoint, e.g. http://127.0.0.1:4000/mcp/echo")
	pid := flag.Int("pid", 0, "the gateway's process id (memory is read from /proc/PID/status)")
	n := flag.Int("n", 10000, "sessions to open (and GET streams, one on each)")
	workers := flag.Int("c", 16, "requests in flight while opening")
	streams := flag.Bool("streams", true, "after the sessions, open one idle GET stream on each")
	settle := flag.Duration("settle", 3*time.Second, "wait this long before each reading")
	gclog := flag.String("gclog", "", "the gateway's stderr, written with GODEBUG=gctrace=1: also report the live heap of its last GC")
	asJSON := flag.Bool("json", false, "print one JSON object instead of text")
	var hdrs headers
	flag.Var(&hdrs, "H", "extra request header 'Name: value' (repeatable), e.g. the API key")
	flag.Parse()
	if *url == "" || *pid == 0 {
		fmt.Fprintln(os.Stderr, "sessions: -url and -pid are required")
		os.Exit(2)
	}

	// Sessions: a few keep-alive connections, reused. Streams: one
	// connection each (HTTP/1.1 holds a connection per open response).
	postClient := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: *workers * 2, MaxIdleConnsPerHost: *workers * 2, IdleConnTimeout: time.Minute,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	}}
	streamTransport := &http.Transport{DisableKeepAlives: true, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}

	set := func(req *http.Request) {
		for _, h := range hdrs {
			name, value, _ := strings.Cut(h, ":")
			req.Header.Set(strings.TrimSpace(name), strings.TrimSpace(value))
		}
	}

	res := result{N: *n, URL: *url}
	time.Sleep(*settle)
	res.Before = read(*pid, *gclog)

	ids := make([]string, *n)
	start := time.Now()
	err := parallel(*n, *workers, func(i int) error {
		id, err := open(postClient, *url, set)
		ids[i] = id
		return err
	})
	if err != nil {
		fail("opening sessions: %v", err)
	}
	res.OpenSessionsSec = time.Since(start).Seconds()
	postClient.CloseIdleConnections()
	time.Sleep(*settle)
	res.Sessions = read(*pid, *gclog)

	var bodies []io.Closer
	if *streams {
		var mu sync.Mutex
		bodies = make([]io.Closer, 0, *n)
		start = time.Now()
		err = parallel(*n, *workers, func(i int) error {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, *url, nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", ids[i])
			set(req)
			resp, err := streamTransport.RoundTrip(req)
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
				return fmt.Errorf("GET stream: %s: %s", resp.Status, bytes.TrimSpace(b))
			}
			mu.Lock()
			bodies = append(bodies, resp.Body)
			mu.Unlock()
			return nil
		})
		if err != nil {
			fail("opening streams (%d open): %v", len(bodies), err)
		}
		res.OpenStreamsSec = time.Since(start).Seconds()
		time.Sleep(*settle)
		res.Streams = read(*pid, *gclog)
	}
	for _, b := range bodies {
		b.Close()
	}

	res.PerSession = per(res.Before, res.Sessions, *n)
	if *streams {
		res.PerStream = per(res.Sessions, res.Streams, *n)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return
	}
	fmt.Printf("opened %d sessions in %.1fs", *n, res.OpenSessionsSec)
	if *streams {
		fmt.Printf(", %d GET streams in %.1fs", *n, res.OpenStreamsSec)
	}
	fmt.Println()
	fmt.Println("| point | VmRSS KiB | RssAnon KiB | live heap at the last GC KiB |")
	fmt.Println("|---|---:|---:|---:|")
	row := func(name string, m mem) {
		fmt.Printf("| %s | %d | %d | %s |\n", name, m.RSSKiB, m.AnonKiB, heapCell(m))
	}
	row("before", res.Before)
	row(fmt.Sprintf("%d idle sessions", *n), res.Sessions)
	if *streams {
		row(fmt.Sprintf("+ %d idle GET streams", *n), res.Streams)
	}
	fmt.Printf("per session: RSS %.0f B, anon %.0f B, live heap %s\n", res.PerSession.RSS, res.PerSession.Anon, bytesCell(res.PerSession.Heap))
	if *streams {
		fmt.Printf("per stream:  RSS %.0f B, anon %.0f B, live heap %s\n", res.PerStream.RSS, res.PerStream.Anon, bytesCell(res.PerStream.Heap))
	}
}

type mem struct {
	RSSKiB  int64 `json:"rss_kib"`
	AnonKiB int64 `json:"rss_anon_kib"`
	// HeapKiB is the live heap the gateway's last GC left (gctrace's
	// third figure); -1: unknown. GCs is how many it had run.
	HeapKiB int64 `json:"heap_live_kib"`
	GCs     int   `json:"gcs"`
}

type delta struct {
	RSS  float64 `json:"rss_bytes"`
	Anon float64 `json:"rss_anon_bytes"`
	Heap float64 `json:"heap_live_bytes"` // -1: unknown
}

type result struct {
	URL             string  `json:"url"`
	N               int     `json:"n"`
	OpenSessionsSec float64 `json:"open_sessions_sec"`
	OpenStreamsSec  float64 `json:"open_streams_sec,omitempty"`
	Before          mem     `json:"before"`
	Sessions        mem     `json:"sessions"`
	Streams         mem     `json:"streams"`
	PerSession      delta   `json:"per_session"`
	PerStream       delta   `json:"per_stream"`
}

func per(a, b mem, n int) delta {
	d := delta{RSS: float64(b.RSSKiB-a.RSSKiB) * 1024 / float64(n), Anon: float64(b.AnonKiB-a.AnonKiB) * 1024 / float64(n), Heap: -1}
	if a.HeapKiB >= 0 && b.HeapKiB >= 0 && b.GCs > a.GCs {
		d.Heap = float64(b.HeapKiB-a.HeapKiB) * 1024 / float64(n)
	}
	return d
}

func heapCell(m mem) string {
	if m.HeapKiB < 0 {
		return "–"
	}
	return fmt.Sprintf("%d (GC #%d)", m.HeapKiB, m.GCs)
}

func bytesCell(v float64) string {
	if v < 0 {
		return "– (no GC in between, or no -gclog)"
	}
	return fmt.Sprintf("%.0f B", v)
}

// open makes one session: initialize, then notifications/initialized.
func open(c *http.Client, url string, set func(*http.Request)) (string, error) {
	do := func(body, sid string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
		}
		set(req)
		return c.Do(req)
	}
	resp, err := do(initBody, "")
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		return "", fmt.Errorf("initialize: %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	resp, err = do(initializedBody, sid)
	if err != nil {
		return "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", fmt.Errorf("notifications/initialized: %s", resp.Status)
	}
	return sid, nil
}

// parallel runs f(0..n-1) on w goroutines; the first error stops it.
func parallel(n, w int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

func read(pid int, gclog string) mem {
	m := mem{HeapKiB: -1}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		fail("reading the gateway's memory: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		x, _ := strconv.ParseInt(fs[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSSKiB = x
		case "RssAnon":
			m.AnonKiB = x
		}
	}
	if gclog != "" {
		m.HeapKiB, m.GCs = lastGC(gclog)
	}
	return m
}

// gctrace: "gc 12 @3.1s 0%: ... ms cpu, 4->4->2 MB, 5 MB goal, ...".
var gcLine = regexp.MustCompile(`^gc (\d+) @.* (\d+)->(\d+)->(\d+) MB`)

// lastGC is the live heap (KiB, MB-granular) and number of the last GC
// line in the gctrace log; -1 when there is none.
func lastGC(path string) (int64, int) {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1, 0
	}
	heap, num := int64(-1), 0
	for line := range strings.Lines(string(b)) {
		if m := gcLine.FindStringSubmatch(line); m != nil {
			num, _ = strconv.Atoi(m[1])
			live, _ := strconv.ParseInt(m[4], 10, 64)
			heap = live * 1024
		}
	}
	return heap, num
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "sessions: "+format+"\n", a...)
	os.Exit(1)
}
