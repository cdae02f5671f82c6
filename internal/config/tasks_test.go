package config

import (
	"strings"
	"testing"
	"time"
)

func TestServerTasks(t *testing.T) {
	const base = "servers:\n  up:\n    transport: http\n    url: https://up.example/mcp\n"
	cfg, err := Parse([]byte(base+"    tasks: {mode: gateway, ttl: 10m, max_per_caller: 5}\n"), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["up"].TaskSettings(); got != (ServerTasks{Mode: TasksGateway, TTL: 10 * time.Minute, MaxPerCaller: 5}) {
		t.Fatalf("tasks = %+v", got)
	}
	cfg, err = Parse([]byte(base+"    tasks: {mode: off}\n"), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["up"].TaskSettings(); got != (ServerTasks{Mode: TasksOff, TTL: time.Hour, MaxPerCaller: 100}) {
		t.Fatalf("defaults inside the block = %+v", got)
	}
	cfg, err = Parse([]byte(base), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Servers["up"].TaskSettings(); got != TasksDefaults {
		t.Fatalf("no block = %+v", got)
	}
	for _, bad := range []struct{ yaml, want string }{
		{"    tasks: {mode: always}\n", "servers.up.tasks.mode"},
		{"    tasks: {ttl: 0s}\n", "servers.up.tasks.ttl"},
		{"    tasks: {max_per_caller: 0}\n", "servers.up.tasks.max_per_caller"},
		{"    tasks: {mode: relay, max: 3}\n", "servers.up.tasks.max"},
	} {
		_, err := Parse([]byte(base+bad.yaml), t.TempDir(), nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v", bad.yaml, err)
		}
	}
}
