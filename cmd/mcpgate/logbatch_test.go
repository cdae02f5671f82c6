package main

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcpgate/mcpgate/internal/gateway"
)

// Access lines wait at most lineBatchDelay; any other record goes out at
// once, after the access lines before it, so the log keeps its order.
func TestAccessLinesBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out lockedBuffer
		log, err := (&logFlags{format: "text", level: "info"}).logger(&out)
		if err != nil {
			t.Fatal(err)
		}
		access := accessCtx(t)
		log.InfoContext(access, "access", "n", 1)
		log.InfoContext(access, "access", "n", 2)
		if out.String() != "" {
			t.Fatalf("an access line was written at once: %q", out.String())
		}
		log.Warn("upstream down")
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], "n=1") || !strings.Contains(lines[1], "n=2") || !strings.Contains(lines[2], "upstream down") {
			t.Fatalf("a warning did not flush the access lines before it, in order: %q", lines)
		}
		log.InfoContext(access, "access", "n", 3)
		time.Sleep(lineBatchDelay - time.Millisecond)
		if strings.Contains(out.String(), "n=3") {
			t.Fatal("written before its delay")
		}
		time.Sleep(2 * time.Millisecond)
		if !strings.Contains(out.String(), "n=3") {
			t.Fatalf("an access line waited more than %v", lineBatchDelay)
		}
		// A full batch goes out whatever its age.
		big := strings.Repeat("x", lineBatchMax)
		log.InfoContext(access, "access", "big", big)
		if !strings.Contains(out.String(), big) {
			t.Fatal("a full batch was held")
		}
	})
}

// accessCtx is the context the gateway logs an access line with.
func accessCtx(t *testing.T) context.Context {
	t.Helper()
	ctx := gateway.AccessLineContext()
	if !gateway.DeferredLine(ctx) || gateway.DeferredLine(context.Background()) {
		t.Fatal("DeferredLine does not tell access lines from others")
	}
	return ctx
}
