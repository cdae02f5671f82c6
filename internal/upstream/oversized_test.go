package upstream

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

func TestClassifyOversized(t *testing.T) {
	tests := []struct {
		name, head, tail string
		kind             oversizedKind
		id               int64
	}{
		{"id first (Python)", `{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"xx`, `xxx"}]}}`, oversizedReply, 7},
		{"id last (TypeScript)", `{"result":{"content":[{"text":"xx`, `xx"}]},"jsonrpc":"2.0","id":12}`, oversizedReply, 12},
		{"id last, spaced", `{"result":{"a":"xx`, "xx\"} , \"id\" : 3 }\n", oversizedReply, 3},
		{"notification", `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"xx`, `xx"}}`, oversizedInbound, 0},
		{"request, method before id", `{"jsonrpc":"2.0","method":"sampling/createMessage","id":4,"params":{"x":"`, `"}}`, oversizedInbound, 0},
		{"id inside the result is not the id", `{"result":{"id":9,"text":"xx`, `xx"}}`, oversizedUnknown, 0},
		{"id in a string at the end", `{"result":"xx`, `x,\"id\":5}"}`, oversizedUnknown, 0},
		{"string id", `{"jsonrpc":"2.0","id":"a","result":"`, `"}`, oversizedUnknown, 0},
		{"id cut off", `{"jsonrpc":"2.0","id":12`, `3"}`, oversizedUnknown, 0},
		{"not an object", `["xx`, `xx"]`, oversizedUnknown, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, id := classifyOversized([]byte(tt.head), []byte(tt.tail))
			if kind != tt.kind || id != tt.id {
				t.Errorf("got %v %d, want %v %d", kind, id, tt.kind, tt.id)
			}
		})
	}
}

// The ends of an oversized message are never misread: on a complete
// object, what scanHead and tailID find is its top-level id, and a prefix
// yields that id or none.
func FuzzOversizedEnds(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"x":[1,2,{"id":3}]}}`))
	f.Add([]byte(`{"result":{"id":2},"jsonrpc":"2.0","id":-5}`))
	f.Add([]byte(`{"method":"m","params":{"s":"a\"b\\"},"id":"x"}`))
	f.Add([]byte(`{"a":"},\"id\":4}"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for k := 0; k <= len(data); k++ {
			scanHead(data[:k])
			tailID(data[k:])
		}
		if !json.Valid(data) || bytes.IndexByte(data, '\\') >= 0 || bytes.Count(data, []byte(`"id"`)) > 1 {
			return // escaped or repeated keys: Get's reading may differ, and no SDK writes them
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		want, ok := jsonrpc.Get(data, "id")
		id, method := scanHead(data)
		if (id != nil) != ok || !bytes.Equal(id, want) {
			t.Fatalf("scanHead id = %q, want %q (%v)", id, want, ok)
		}
		if _, has := obj["method"]; has != method {
			t.Fatalf("scanHead method = %v, want %v", method, has)
		}
		if got := tailID(data); got != nil && !bytes.Equal(got, want) {
			t.Fatalf("tailID = %q, want %q", got, want)
		}
		for k := 0; k < len(data); k++ {
			if got, _ := scanHead(data[:k]); got != nil && !bytes.Equal(got, want) {
				t.Fatalf("scanHead of %q = %q, want %q or nothing", data[:k], got, want)
			}
		}
	})
}
