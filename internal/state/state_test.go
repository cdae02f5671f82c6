package state_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
)

func TestParseEventID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1", 1, true},
		{"42", 42, true},
		{"18446744073709551615", 1<<64 - 1, true},
		{"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{"0", 0, false},
		{"01", 0, false},
		{"+1", 0, false},
		{"-1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1e3", 0, false},
		{"0x10", 0, false},
		{"١", 0, false}, // a non-ASCII digit
		{"123456789012345678901", 0, false},
	} {
		got, err := state.ParseEventID(tc.in)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ParseEventID(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, state.ErrInvalid) {
			t.Errorf("ParseEventID(%q) = %d, %v; want ErrInvalid", tc.in, got, err)
		}
	}
}

// FuzzParseEventID: ParseEventID accepts exactly the canonical decimal
// form of a uint64 from 1, and its errors never quote the input.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"1", "0", "01", "18446744073709551615", "18446744073709551616", "-1", "", "1-0", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := state.ParseEventID(s)
		if err != nil {
			if !errors.Is(err, state.ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			// The message depends on the input's length only.
			if got := err.Error(); got != fmt.Sprintf("invalid argument: event id must be a decimal number from 1 (got %d bytes)", len(s)) &&
				got != "invalid argument: event id out of range" {
				t.Fatalf("error %q may quote the input", got)
			}
			if v, perr := strconv.ParseUint(s, 10, 64); perr == nil && v > 0 && strconv.FormatUint(v, 10) == s {
				t.Fatalf("refused canonical id %q", s)
			}
			return
		}
		if n == 0 || strconv.FormatUint(n, 10) != s {
			t.Fatalf("ParseEventID(%q) = %d, not its canonical form", s, n)
		}
	})
}

// GCRA: an idle bucket takes burst events at once, then one per interval;
// refusals take nothing.
func TestGCRA(t *testing.T) {
	const interval, burst = 100, 3
	var tat int64
	now := int64(1_000_000)
	var got []string
	step := func(at int64) {
		var d state.Decision
		tat, d = state.GCRA(at, tat, interval, burst)
		got = append(got, fmt.Sprintf("%d:%v/%d/%s", at-now, d.Allowed, d.Remaining, d.RetryAfter))
	}
	for _, at := range []int64{0, 0, 0, 0, 50, 100, 100, 350, 1000} {
		step(now + at)
	}
	want := []string{
		"0:true/2/0s", "0:true/1/0s", "0:true/0/0s",
		"0:false/0/100µs", "50:false/0/50µs",
		"100:true/0/0s", "100:false/0/100µs",
		"350:true/1/0s", // two intervals and a half refilled two events
		"1000:true/2/0s",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got  %v\nwant %v", got, want)
	}
}

func TestLimit(t *testing.T) {
	l := state.Limit{Events: 100, Per: time.Minute, Burst: 20}
	if got := l.Interval(); got != 600*time.Millisecond {
		t.Errorf("Interval = %s", got)
	}
	if got := (state.Limit{Events: 3, Per: time.Microsecond}).Interval(); got != time.Microsecond {
		t.Errorf("Interval below 1µs = %s, want 1µs", got)
	}
	for _, tc := range []struct {
		n    int
		want state.Limit
	}{
		{0, l},
		{1, l},
		{4, state.Limit{Events: 100, Per: 4 * time.Minute, Burst: 5}},
		{30, state.Limit{Events: 100, Per: 30 * time.Minute, Burst: 1}},
	} {
		got := l.PerReplica(tc.n)
		if got != tc.want {
			t.Errorf("PerReplica(%d) = %+v, want %+v", tc.n, got, tc.want)
		}
		if got.Validate() != nil {
			t.Errorf("PerReplica(%d) is not a valid limit: %v", tc.n, got.Validate())
		}
	}
}

func TestUnavailableError(t *testing.T) {
	cause := errors.New("dial unix /x: connect: no such file")
	err := fmt.Errorf("rate limit: %w", &state.UnavailableError{Op: "allow", Err: cause})
	if !errors.Is(err, state.ErrUnavailable) || !errors.Is(err, cause) {
		t.Errorf("%v: errors.Is ErrUnavailable %v, cause %v", err, errors.Is(err, state.ErrUnavailable), errors.Is(err, cause))
	}
	if errors.Is(err, state.ErrInvalid) {
		t.Error("an UnavailableError is ErrInvalid")
	}
	if want := "rate limit: state allow: state backend unavailable: dial unix /x: connect: no such file"; err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
}
