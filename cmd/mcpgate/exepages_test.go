package main

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"testing"
)

func TestTrimExecutableSetting(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{"", "trimmed the executable's start-up pages"},
		{"trim", "trimmed the executable's start-up pages"},
		{"unmap", "trimmed the executable's start-up pages"},
		{"keep", ""},
		{"Keep", "level=WARN msg=\"MCPGATE_EXE_PAGES is trim (the default), unmap or keep; keeping the executable's pages\" value=Keep"},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		trimExecutable(func(k string) string {
			if k == exePagesEnv {
				return tc.value
			}
			return ""
		}, log)
		got := buf.String()
		want := tc.want
		if runtime.GOOS != "linux" && strings.HasPrefix(want, "trimmed") {
			want = ""
		}
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s=%q: logged %q, want %q", exePagesEnv, tc.value, got, want)
		}
		if strings.Contains(got, "WARN") != strings.Contains(want, "WARN") {
			t.Errorf("%s=%q: logged %q", exePagesEnv, tc.value, got)
		}
	}
}
