package gateway

import (
	"strings"
	"testing"
)

func TestClassifyBody(t *testing.T) {
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name string
		body string
		want bodyKind
	}{
		{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`, bodyRequest},
		{"method after params", `{"jsonrpc":"2.0","id":1,"params":{"a":[1,{"b":"}"}]},"method":"tools/call"}`, bodyRequest},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, bodyRequest},
		{"cancel", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, bodyCancel},
		{"result", `{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}`, bodyResponse},
		{"method nested in a result", `{"jsonrpc":"2.0","id":1,"result":{"method":"tools/call","x":{"method":"y"}}}`, bodyResponse},
		{"method in a string", `{"jsonrpc":"2.0","id":"\"method\":\"x\"","result":{}}`, bodyResponse},
		{"error", `{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"method"}}`, bodyResponse},
		{"truncated response", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"text":"` + long[:4000], bodyResponse},
		{"truncated request", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"x":"` + long[:4000], bodyRequest},
		{"batch of responses", `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"error":{"code":1,"message":"m"}}]`, bodyResponse},
		{"batch with a request", `[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, bodyRequest},
		{"empty", ``, bodyResponse},
		{"garbage", `hello`, bodyRequest},
		{"escaped quote in key", `{"me\"thod":"x","id":1,"result":{}}`, bodyResponse},
	}
	for _, tt := range tests {
		b := []byte(tt.body)
		if len(b) > peekSize {
			b = b[:peekSize]
		}
		if got := classifyBody(b); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func FuzzClassifyBody(f *testing.F) {
	for _, s := range []string{`{"method":"a"}`, `{"id":1,"result":{"method":"x"}}`, `[{"id":1,"result":{}}]`, `{"a":"\\"}`, `[`, `{"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k := classifyBody(b) // must not panic or loop
		if k == bodyCancel && !strings.Contains(string(b), "notifications/cancelled") {
			t.Fatalf("cancel without the method in %q", b)
		}
	})
}
