package main

import (
	"encoding/json"
	"net/url"
	"testing"
	"time"
)

func TestParseTimeArg(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in     string
		future bool
		want   time.Time
	}{
		{"1h", false, now.Add(-time.Hour)},
		{"90m", false, now.Add(-90 * time.Minute)},
		{"7d", false, now.AddDate(0, 0, -7)},
		{"30d", true, now.AddDate(0, 0, 30)},
		{"2w", true, now.AddDate(0, 0, 14)},
		{"1w2d", true, now.AddDate(0, 0, 9)},
		{"1d12h", false, now.Add(-36 * time.Hour)},
		{"2026-12-31T23:59:59Z", true, time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC)},
		{"2026-11-01", false, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)},
	} {
		got, err := parseTimeArg("x", tc.in, now, tc.future)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("%q (future %v): %v %v, want %v", tc.in, tc.future, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "yesterday", "-1h", "3x", "d", "1d3", "999999999d"} {
		if got, err := parseTimeArg("x", bad, now, false); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

// --since and --until take durations ago, --expires a duration from now;
// the gateway gets RFC 3339 times either way.
func TestDurationFlags(t *testing.T) {
	clearAdminEnv(t)
	f := newFakeAdmin(t, canned(`{"alias":"bot","key":"mcpg_x","total":0,"usage":[],"calls":[]}`))
	within := func(what, got string, want time.Time) {
		t.Helper()
		tm, err := time.Parse(time.RFC3339Nano, got)
		if err != nil || tm.Sub(want).Abs() > time.Minute {
			t.Errorf("%s = %q, want about %s", what, got, want.Format(time.RFC3339))
		}
	}

	if code, _, stderr := cli(t, "usage", "--url", f.URL, "--since", "30d", "--until", "1h"); code != 0 {
		t.Fatalf("usage: exit %d %s", code, stderr)
	}
	q, _ := url.ParseQuery(f.last(t).Query)
	within("usage since", q.Get("since"), time.Now().AddDate(0, 0, -30))
	within("usage until", q.Get("until"), time.Now().Add(-time.Hour))

	if code, _, stderr := cli(t, "audit", "--url", f.URL, "--since", "1h"); code != 0 {
		t.Fatalf("audit: exit %d %s", code, stderr)
	}
	q, _ = url.ParseQuery(f.last(t).Query)
	within("audit since", q.Get("since"), time.Now().Add(-time.Hour))

	if code, _, stderr := cli(t, "keys", "create", "--url", f.URL, "--alias", "bot", "--expires", "30d"); code != 0 {
		t.Fatalf("keys create: exit %d %s", code, stderr)
	}
	var body struct {
		Expires string `json:"expires"`
	}
	json.Unmarshal(f.last(t).Body, &body)
	within("keys create expires", body.Expires, time.Now().AddDate(0, 0, 30))

	for _, args := range [][]string{{"usage", "--since", "yesterday"}, {"audit", "--since", "soon"}, {"keys", "create", "--alias", "b", "--expires", "-3d"}} {
		if code, _, stderr := cli(t, append(args, "--url", f.URL)...); code != 2 {
			t.Errorf("%v: exit %d %s, want 2", args, code, stderr)
		}
	}
}
