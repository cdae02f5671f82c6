package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
	"github.com/mcpgate/mcpgate/internal/tasks"
)

// TestTaskResultsSealedInStore: with fleet.session_keys and a store, the
// row of a finished task holds its result sealed, never in clear, and the
// task's owner still fetches it; a gateway of other session keys over the
// same store is shown nothing (its id does not open there).
func TestTaskResultsSealedInStore(t *testing.T) {
	up, srv := startTaskUpstream(t)
	st, err := sqlite.Open(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := &memKeys{}
	alice := keys.add(t, store.Key{Alias: "alice"})
	auth := newAuth(t, keys, nil)
	gateway := func(root byte) string {
		cfg := &config.Config{Servers: map[string]*config.Server{"plain": srv},
			Fleet: &config.Fleet{SessionKeys: []string{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{root}, 32))}}}
		_, gw := startGatewayWith(t, Options{Authenticator: auth, Config: cfg, Tasks: st})
		return gw.URL + "/mcp/plain"
	}
	c, _ := newTaskClient(t, gateway(7), alice, "2025-11-25")
	id := c.startTask("slow", "the-secret-answer")["taskId"].(string)
	close(up.release)
	r := c.call("tasks/result", map[string]string{"taskId": id})
	if r.Error != nil || !strings.Contains(string(r.Result), "slow:the-secret-answer") {
		t.Fatalf("tasks/result: %+v %s", r.Error, r.Result)
	}

	nonce, _, err := tasks.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	var row store.TaskRecord
	deadline := time.Now().Add(5 * time.Second)
	for {
		row, err = st.GetTask(t.Context(), hex.EncodeToString(nonce[:]))
		if err != nil {
			t.Fatal(err)
		}
		if row.Status == store.TaskCompleted || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if row.Status != store.TaskCompleted || bytes.Contains(row.Result, []byte("the-secret-answer")) || !bytes.HasPrefix(row.Result, []byte(`"mcpts1.`)) {
		t.Fatalf("stored row: %s with result %s; want completed and sealed", row.Status, row.Result)
	}

	// Another fleet's gateway on the same store opens neither the id nor
	// the result: the id names nothing there.
	other, _ := newTaskClient(t, gateway(8), alice, "2025-11-25")
	wantNotFound(t, "another fleet's tasks/result", other.call("tasks/result", map[string]string{"taskId": id}))
}
