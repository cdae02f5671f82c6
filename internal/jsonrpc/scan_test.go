package jsonrpc

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// toolReply is a tools/call reply of about n bytes: text content items
// with escapes and non-ASCII, as a tool's output looks.
func toolReply(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":7,"result":{"content":[`)
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"type":"text","text":"line %d of the tool's output, with \"quotes\", \u00e9 and numbers %d %g"}`, i, i*7, float64(i)/3)
	}
	b.WriteString(`],"isError":false}}`)
	return []byte(b.String())
}

// BenchmarkDecodeReply is Decode of an upstream's tools/call reply: the
// gateway validates every reply whole before it forwards its result.
func BenchmarkDecodeReply(b *testing.B) {
	for _, n := range []int{200, 10 << 10, 100 << 10} {
		data := toolReply(n)
		b.Run(fmt.Sprint(len(data)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for range b.N {
				if _, err := Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// skipStringBytewise is skipString as it was first written, byte by
// byte: the oracle FuzzSkipString holds the vector version to.
func skipStringBytewise(d []byte, i int) (int, error) {
	i++ // opening quote
	for i < len(d) {
		switch d[i] {
		case '\\':
			i += 2
			continue
		case '"':
			return i + 1, nil
		}
		i++
	}
	return 0, ErrMalformed
}

func TestSkipString(t *testing.T) {
	for _, s := range []string{`""`, `"a"`, `"a\"b"`, `"a\\"`, `"a\\\"b"`, `"\\\\"x`, `"abc`, `"abc\"`, `"abc\`, `"\`, `"`,
		`"\u0022"`, `"é\n\t"` + "rest", `"x\\\\\"y\\"tail"`} {
		got, gerr := skipString([]byte(s), 0)
		want, werr := skipStringBytewise([]byte(s), 0)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("skipString(%q) = %d, %v; want %d, %v", s, got, gerr, want, werr)
		}
	}
}

// FuzzSkipString holds skipString to the byte-by-byte scan on any input,
// valid JSON or not (Get and friends run it on unchecked bytes too).
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"a\"b"`, `"a\\"`, `"abc\`, `"\\\"\\"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		if len(d) == 0 || d[0] != '"' {
			d = append([]byte{'"'}, d...)
		}
		got, gerr := skipString(d, 0)
		want, werr := skipStringBytewise(d, 0)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Fatalf("skipString(%q) = %d, %v; want %d, %v", d, got, gerr, want, werr)
		}
	})
}

// FuzzValidAsStandardLibrary holds valid to encoding/json.Valid: the
// gateway's refusal of malformed JSON (a parse error, -32700) must not
// change with the faster validator.
func FuzzValidAsStandardLibrary(f *testing.F) {
	for _, s := range []string{`{}`, ` [1, 2.5e-3, "x\u0041", null, true, {"a": {}}] `, `{"a":1,}`, `"\x06"`, `1e`, `-0`, `01`,
		"\"\xff\"", `{"a":"\ud800"}`, `[` + strings.Repeat("[", 20) + strings.Repeat("]", 21)} {
		f.Add([]byte(s))
	}
	f.Add(toolReply(300))
	for _, n := range []int{MaxDepth, MaxDepth + 1} {
		f.Add([]byte(strings.Repeat(`{"a":[`, n/2) + strings.Repeat(`]}`, n/2)))
		f.Add([]byte(strings.Repeat("[", n) + strings.Repeat("]", n)))
	}
	f.Fuzz(func(t *testing.T, d []byte) {
		if got, want := valid(d), json.Valid(d); got != want {
			t.Fatalf("valid(%q) = %v, encoding/json.Valid %v", d, got, want)
		}
	})
}

func TestAppendResultHead(t *testing.T) {
	for _, m := range []*Message{
		{ID: Int64ID(7), Result: json.RawMessage(`{"content":[]}`)},
		{ID: StringID("a\"b"), Result: json.RawMessage(`[1,2]`)},
		{Result: json.RawMessage(`{}`)},
	} {
		head, ok := m.AppendResultHead([]byte("x"))
		if !ok {
			t.Fatalf("%s: not a result", Encode(m))
		}
		if got, want := string(head[1:])+string(m.Result)+"}", string(Encode(m)); got != want {
			t.Errorf("head+result+} = %s, want %s", got, want)
		}
	}
	for _, m := range []*Message{
		{ID: Int64ID(1), Method: "tools/call", Params: json.RawMessage(`{}`)},
		{ID: Int64ID(1), Error: NewError(CodeInternalError, "x")},
		{ID: Int64ID(1)},
	} {
		if head, ok := m.AppendResultHead([]byte("x")); ok || string(head) != "x" {
			t.Errorf("%s: AppendResultHead = %q, %v; want buf unchanged, false", Encode(m), head, ok)
		}
	}
}

// A hostile upstream's reply whose result would close the envelope the
// gateway writes around it and open another (a second id, a member of
// its own) is not JSON, and Decode refuses it, at any size: a result is
// only ever spliced into a reply after its message was validated whole.
func TestDecodeRefusesEnvelopeBreakout(t *testing.T) {
	pad := strings.Repeat(`{"type":"text","text":"x"},`, 4000) // over 64 KiB: the zero-copy reply's size
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"result":1},"id":99,"x":{}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[` + pad + `{}]}},{"jsonrpc":"2.0","id":99,"result":{}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[` + pad + `{"text":"a"}]}`,
		`{"jsonrpc":"2.0","id":1,"result":{"content":[` + pad + `{"text":"a` + "\x01" + `"}]}}`,
	} {
		if m, err := Decode([]byte(body)); err == nil {
			t.Errorf("Decode(%.60q... %d bytes) = %+v, want a parse error", body, len(body), m)
		}
	}
}
