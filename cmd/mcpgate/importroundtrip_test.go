package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// importServerEnv makes the test binary a go-sdk MCP server over stdio
// (see TestMain) whose tools are named after the variable's value; it
// refuses to start unless importTokenEnv holds that value's token, so a
// secret the import moved must reach it through the gateway's env.
const (
	importServerEnv = "MCPGATE_IMPORT_TEST_SERVER"
	importTokenEnv  = "UPSTREAM_API_TOKEN"
)

func importToken(name string) string { return "tok-" + name + "-s3cr3t" }

// runImportServer serves the stdio server named name; it returns the
// process's exit code.
func runImportServer(name string) int {
	if os.Getenv(importTokenEnv) != importToken(name) {
		fmt.Fprintln(os.Stderr, "import test server: wrong or missing", importTokenEnv)
		return 3
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1.0.0"}, nil)
	for _, tool := range []string{"echo", name + "_status"} {
		mcp.AddTool(srv, &mcp.Tool{Name: tool, Description: tool + " of " + name},
			func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tool}}}, nil, nil
			})
	}
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "import test server:", err)
		return 1
	}
	return 0
}

// headerTransport adds fixed headers to every request of an SDK client.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// requireHeader answers 401 unless the request has header name: value.
func requireHeader(name, value string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(name) != value {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// toolNames lists every tool of a go-sdk client session.
func toolNames(ctx context.Context, t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// directServer is one upstream of the round trip, as the client file
// declares it and as the test reaches it without the gateway.
type directServer struct {
	clientName string         // its name in the client file
	gwName     string         // the name the import gives it
	connect    mcp.Transport  // how the test reaches it directly
	entry      map[string]any // its entry in the client file
}

// TestImportRoundTrip: a client file whose servers are real MCP servers
// (go-sdk servers over stdio, as child processes, streamable HTTP with a
// Bearer token and legacy SSE with an API key; the notes example) is
// imported; the real binary serves the result with the variables the
// import listed set; the go-sdk client lists through the gateway exactly
// the namespaced union of what it lists from each server directly.
func TestImportRoundTrip(t *testing.T) {
	gw, notes := buildBinary(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const (
		httpToken = "http-tok-s3cr3t"
		sseKey    = "sse-key-s3cr3t"
	)
	streamable := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	sse := mcp.NewServer(&mcp.Implementation{Name: "legacy", Version: "1"}, nil)
	for srv, tools := range map[*mcp.Server][]string{streamable: {"search", "fetch"}, sse: {"lookup"}} {
		for _, name := range tools {
			mcp.AddTool(srv, &mcp.Tool{Name: name, Description: "does " + name},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
				})
		}
	}
	httpTS := httptest.NewServer(requireHeader("Authorization", "Bearer "+httpToken,
		mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return streamable }, nil)))
	t.Cleanup(httpTS.Close)
	sseTS := httptest.NewServer(requireHeader("X-API-Key", sseKey,
		mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return sse }, nil)))
	t.Cleanup(sseTS.Close)
	notesFile := filepath.Join(t.TempDir(), "notes.json")

	stdioCmd := func(name string) *exec.Cmd {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), importServerEnv+"="+name, importTokenEnv+"="+importToken(name))
		return cmd
	}
	servers := []directServer{
		{"Local Tools", "local-tools", &mcp.CommandTransport{Command: stdioCmd("local")},
			map[string]any{"command": exe, "env": map[string]string{importServerEnv: "local", importTokenEnv: importToken("local")}}},
		{"second", "second", &mcp.CommandTransport{Command: stdioCmd("second")},
			map[string]any{"command": exe, "args": []string{}, "env": map[string]string{importServerEnv: "second", importTokenEnv: importToken("second")}}},
		{"notes", "notes", &mcp.CommandTransport{Command: exec.Command(notes, "-file", notesFile)},
			map[string]any{"command": notes, "args": []string{"-file", notesFile}}},
		{"remote", "remote", &mcp.StreamableClientTransport{Endpoint: httpTS.URL + "/mcp", HTTPClient: &http.Client{Transport: headerTransport{"Authorization": "Bearer " + httpToken}}},
			map[string]any{"url": httpTS.URL + "/mcp", "headers": map[string]string{"Authorization": "Bearer " + httpToken}}},
		{"legacy", "legacy", &mcp.SSEClientTransport{Endpoint: sseTS.URL + "/sse", HTTPClient: &http.Client{Transport: headerTransport{"X-API-Key": sseKey}}},
			map[string]any{"url": sseTS.URL + "/sse", "headers": map[string]string{"X-API-Key": sseKey}}},
	}
	// The values of the variables the import must ask for.
	secrets := map[string]string{
		"MCPGATE_LOCAL_TOOLS_UPSTREAM_API_TOKEN": importToken("local"),
		"MCPGATE_SECOND_UPSTREAM_API_TOKEN":      importToken("second"),
		"MCPGATE_REMOTE_AUTHORIZATION":           "Bearer " + httpToken,
		"MCPGATE_LEGACY_X_API_KEY":               sseKey,
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "roundtrip", Version: "1"}, nil)
	var want []string
	for _, s := range servers {
		cs, err := client.Connect(ctx, s.connect, nil)
		if err != nil {
			t.Fatalf("connect to %s directly: %v", s.clientName, err)
		}
		for _, n := range toolNames(ctx, t, cs) {
			want = append(want, s.gwName+"__"+n)
		}
		cs.Close()
	}
	slices.Sort(want)
	t.Logf("tools listed directly: %v", want)

	// Cursor's file (no type: the transport follows from command and url)
	// and VS Code's (type, the key from an input).
	for _, format := range []string{"cursor", "vscode"} {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			entries := map[string]any{}
			for _, s := range servers {
				e := map[string]any{}
				for k, v := range s.entry {
					e[k] = v
				}
				if format == "vscode" {
					switch {
					case e["command"] != nil:
						e["type"] = "stdio"
					case strings.HasSuffix(e["url"].(string), "/sse"):
						e["type"] = "sse"
					default:
						e["type"] = "http"
					}
				}
				entries[s.clientName] = e
			}
			var doc map[string]any
			file := filepath.Join(dir, ".cursor", "mcp.json")
			if format == "vscode" {
				file = filepath.Join(dir, ".vscode", "mcp.json")
				// The remote token comes from a prompted input instead.
				remote := entries["remote"].(map[string]any)
				remote["headers"] = map[string]string{"Authorization": "Bearer ${input:remote-token}"}
				doc = map[string]any{"inputs": []any{map[string]any{"type": "promptString", "id": "remote-token", "password": true}}, "servers": entries}
			} else {
				doc = map[string]any{"mcpServers": entries}
			}
			b, _ := json.MarshalIndent(doc, "", "  ")
			os.MkdirAll(filepath.Dir(file), 0o700)
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "mcpgate.yaml")
			code, stdout, stderr := runCmd("import", file, "--out", out, "--json")
			if code != 0 {
				t.Fatalf("import: exit %d: %s", code, stderr)
			}
			written, _ := os.ReadFile(out)
			if strings.Contains(stdout+stderr+string(written), secretMark) {
				t.Fatalf("a secret value in the output:\n%s\n%s\n%s", stdout, stderr, written)
			}
			var rep importReport
			if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
				t.Fatal(err)
			}
			wantVars := map[string]string{}
			for k, v := range secrets {
				wantVars[k] = v
			}
			if format == "vscode" {
				delete(wantVars, "MCPGATE_REMOTE_AUTHORIZATION")
				wantVars["MCPGATE_REMOTE_REMOTE_TOKEN"] = httpToken // the input holds the token alone
			}
			var env, gotNames, wantNames []string
			for _, v := range rep.Variables {
				gotNames = append(gotNames, v.Name)
				env = append(env, v.Name+"="+wantVars[v.Name])
			}
			for k := range wantVars {
				wantNames = append(wantNames, k)
			}
			slices.Sort(gotNames)
			slices.Sort(wantNames)
			if diff := cmp.Diff(gotNames, wantNames); diff != "" {
				t.Fatalf("variables to set (-got +want)\n%s", diff)
			}

			p := startGateway(t, gw, out, env...)
			gwClient := mcp.NewClient(&mcp.Implementation{Name: "roundtrip-gw", Version: "1"}, nil)
			var got []string
			deadline := time.Now().Add(30 * time.Second)
			for {
				cs, err := gwClient.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url + "/mcp"}, nil)
				if err != nil {
					t.Fatalf("connect to the gateway: %v", err)
				}
				got = toolNames(ctx, t, cs)
				cs.Close()
				// An upstream still starting is left out of the list for now.
				if slices.Equal(got, want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("tools through the gateway (-got +want)\n%s\ngateway log:\n%s", diff, p.Log())
			}
		})
	}
}
