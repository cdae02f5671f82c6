package main

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/exepages"
)

func TestTrimExecutableSetting(t *testing.T) {
	for _, tc := range []struct {
		value   string
		on      bool
		mode    exepages.Mode
		warning string
	}{
		{"", true, exepages.Evict, ""},
		{"trim", true, exepages.Evict, ""},
		{"unmap", true, exepages.Unmap, ""},
		{"keep", false, 0, ""},
		{"Keep", false, 0, "level=WARN msg=\"MCPGATE_EXE_PAGES is trim (the default), unmap or keep; keeping the executable's pages\" value=Keep"},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		mode, on := exePages(func(k string) string {
			if k == exePagesEnv {
				return tc.value
			}
			return ""
		}, log)
		if on != tc.on || mode != tc.mode {
			t.Errorf("%s=%q: mode %v, on %v; want %v, %v", exePagesEnv, tc.value, mode, on, tc.mode, tc.on)
		}
		if got := buf.String(); tc.warning == "" && got != "" || !strings.Contains(got, tc.warning) {
			t.Errorf("%s=%q: logged %q, want %q", exePagesEnv, tc.value, got, tc.warning)
		}
	}
}

func TestTrimExecutableLogs(t *testing.T) {
	for _, mode := range []exepages.Mode{exepages.Unmap, exepages.Evict} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		trimExecutable(mode, "start", log)
		got := buf.String()
		if runtime.GOOS != "linux" {
			if got != "" {
				t.Errorf("mode %v off Linux: logged %q", mode, got)
			}
			continue
		}
		if !strings.Contains(got, "level=DEBUG msg=\"trimmed the executable's start-up pages\" stage=start mapped_bytes=") || strings.Contains(got, "WARN") {
			t.Errorf("mode %v: logged %q", mode, got)
		}
	}
}

// A trim that had to wait (for a freshly written executable's pages to
// reach slow storage) delays serving: it is logged as a warning with how
// long it took; a quick one only at debug.
func TestSlowTrimWarns(t *testing.T) {
	defer func(d time.Duration) { slowTrim = d }(slowTrim)
	slowTrim = 20 * time.Millisecond
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	trimWith(func(exepages.Mode) (uint64, error) { return 1 << 20, nil }, exepages.Evict, "serving", log)
	if buf.Len() != 0 {
		t.Errorf("a quick trim logged at info or above: %s", buf.String())
	}
	trimWith(func(exepages.Mode) (uint64, error) { time.Sleep(30 * time.Millisecond); return 1 << 20, nil }, exepages.Evict, "serving", log)
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "written back") || !strings.Contains(out, "took=") {
		t.Errorf("a slow trim: %q, want a warning saying it waited and how long", out)
	}
}
