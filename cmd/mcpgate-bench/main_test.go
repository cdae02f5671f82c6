package main

import (
	"net/http/httptest"
	"testing"

	"github.com/mcpgate/mcpgate/examples/echo/echoserver"
)

func TestRun(t *testing.T) {
	srv := httptest.NewServer(echoserver.Handler())
	defer srv.Close()
	if code := run([]string{"-url", srv.URL + "/mcp", "-c", "2", "-n", "20", "-warmup", "0", "-json", "-H", "X-Test: 1"}); code != 0 {
		t.Errorf("run = %d, want 0", code)
	}
	if code := run([]string{"-url", srv.URL, "-n", "5", "-warmup", "0", "-tool", "nope"}); code != 1 {
		t.Errorf("run with unknown tool = %d, want 1", code)
	}
	if code := run([]string{"-args", "{bad"}); code != 2 {
		t.Errorf("run with bad -args = %d, want 2", code)
	}
	if code := run([]string{"-H", "no colon"}); code != 2 {
		t.Errorf("run with bad -H = %d, want 2", code)
	}
}
