package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
)

// newRequestTo builds what http.NewRequestWithContext builds (the
// streamable POST's fast path), and its body can be had again.
func TestNewRequestToMatchesNewRequest(t *testing.T) {
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	var b httpBase
	for _, target := range []string{
		"http://127.0.0.1:8080/mcp",
		"http://example.com:/mcp?x=1",
		"http://[::1]:/mcp",
		"http://[::1]/mcp",
		"https://user@example.com/a%2Fb/mcp",
	} {
		for _, body := range [][]byte{[]byte(`{"jsonrpc":"2.0"}`), nil} {
			want, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytesReaderOrNil(body))
			if err != nil {
				t.Fatal(err)
			}
			got := b.newRequestTo(ctx, http.MethodPost, parseTarget(target), body)
			if got.URL.String() != want.URL.String() || got.Host != want.Host || got.Method != want.Method ||
				got.Proto != want.Proto || got.ContentLength != want.ContentLength || got.Context() != ctx ||
				(got.Body == nil) != (want.Body == nil) || (got.GetBody == nil) != (want.GetBody == nil) || len(got.Header) != 0 {
				t.Errorf("%s: got %+v\nwant %+v", target, got, want)
			}
			if body == nil {
				continue
			}
			for range 2 {
				first, _ := io.ReadAll(got.Body)
				again, err := got.GetBody()
				if err != nil {
					t.Fatal(err)
				}
				second, _ := io.ReadAll(again)
				if string(first) != string(body) || string(second) != string(body) {
					t.Errorf("body %q, again %q, want %q", first, second, body)
				}
				got.Body = again
				got.Body, _ = got.GetBody()
			}
		}
	}
	if parseTarget("http://a b/") != nil {
		t.Error("a target that does not parse gave a URL")
	}
}

func bytesReaderOrNil(b []byte) io.Reader {
	if b == nil {
		return nil
	}
	return bytes.NewReader(b)
}
