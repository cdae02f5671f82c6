package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// got is the (value, found) pair of a lookup, as strings for readable diffs.
type got struct {
	Val   string
	Found bool
}

func TestGet(t *testing.T) {
	tests := []struct {
		name string
		obj  string
		key  string
		want got
	}{
		{"first", `{"a":1,"b":2}`, "a", got{"1", true}},
		{"last", `{"a":1,"b":2}`, "b", got{"2", true}},
		{"missing", `{"a":1}`, "b", got{}},
		{"empty object", `{}`, "a", got{}},
		{"whitespace everywhere", " { \"a\" : 1 ,\n\t\"b\" :\r\n [ 1 , 2 ] } ", "b", got{"[ 1 , 2 ]", true}},
		{"nested object value", `{"a":{"b":{"c":[1,{"d":"}"}]}},"e":0}`, "a", got{`{"b":{"c":[1,{"d":"}"}]}}`, true}},
		{"after nested value", `{"a":{"b":{"c":[1,{"d":"}"}]}},"e":0}`, "e", got{"0", true}},
		{"nested key is not top-level", `{"x":{"a":1}}`, "a", got{}},
		{"nested key before top-level key", `{"x":{"a":1},"a":2}`, "a", got{"2", true}},
		{"key text inside a string value", `{"x":"\"a\":1"}`, "a", got{}},
		{"string with braces and brackets", `{"s":"{[}]","t":3}`, "t", got{"3", true}},
		{"string with escaped quotes", `{"s":"a\"b\\","t":3}`, "s", got{`"a\"b\\"`, true}},
		{"string ending in escaped backslash", `{"s":"\\","t":3}`, "t", got{"3", true}},
		{"escaped quote in key", `{"a\"b":1}`, `a"b`, got{"1", true}},
		{"unicode escape in key", `{"\u0061":2}`, "a", got{"2", true}},
		{"escaped slash in key", `{"a\/b":2}`, "a/b", got{"2", true}},
		{"raw unicode key", `{"é":2}`, "é", got{"2", true}},
		{"escaped key does not match raw text", `{"\u0061":2}`, `\u0061`, got{}},
		{"empty key", `{"":5}`, "", got{"5", true}},
		{"literal values", `{"n":null,"t":true,"f":false,"x":-1.5e3}`, "x", got{"-1.5e3", true}},
		{"null value", `{"n":null}`, "n", got{"null", true}},
		{"repeated key: last wins, as decoders do", `{"name":"a","x":1,"name":"b"}`, "name", got{`"b"`, true}},
		{"invalid UTF-8 key matches U+FFFD, as decoders do", "{\"\xff\":1}", "\ufffd", got{"1", true}},
		{"array", `[{"a":1}]`, "a", got{}},
		{"string", `"a"`, "a", got{}},
		{"empty input", ``, "a", got{}},
		{"truncated", `{"a":1,"b":`, "b", got{}},
		{"unterminated string", `{"a":"1}`, "a", got{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := jsonrpc.Get([]byte(tt.obj), tt.key)
			if diff := cmp.Diff(got{string(v), ok}, tt.want); diff != "" {
				t.Errorf("Get(%s, %q) (-got +want):\n%s", tt.obj, tt.key, diff)
			}
		})
	}
}

func TestGetPath(t *testing.T) {
	obj := `{"_meta":{"progressToken":"t","n":{"deep":[1]}},"name":"x"}`
	tests := []struct {
		keys []string
		want got
	}{
		{nil, got{obj, true}},
		{[]string{"name"}, got{`"x"`, true}},
		{[]string{"_meta", "progressToken"}, got{`"t"`, true}},
		{[]string{"_meta", "n", "deep"}, got{`[1]`, true}},
		{[]string{"_meta", "missing"}, got{}},
		{[]string{"name", "x"}, got{}},
		{[]string{"missing", "x"}, got{}},
	}
	for _, tt := range tests {
		v, ok := jsonrpc.GetPath([]byte(obj), tt.keys...)
		if diff := cmp.Diff(got{string(v), ok}, tt.want); diff != "" {
			t.Errorf("GetPath(%q) (-got +want):\n%s", tt.keys, diff)
		}
	}
}

func TestGetString(t *testing.T) {
	obj := `{"s":"plain","e":"a\"b\u00e9\n","n":1,"z":null,"o":{"s":"x"},"bad":"\x"}`
	tests := []struct {
		key  string
		want got
	}{
		{"s", got{"plain", true}},
		{"e", got{"a\"bé\n", true}},
		{"n", got{}},
		{"z", got{}},
		{"o", got{}},
		{"missing", got{}},
		{"u", got{"a\ufffdb", true}}, // invalid UTF-8 is replaced, as json.Unmarshal does
	}
	obj = obj[:len(obj)-1] + ",\"u\":\"a\xffb\"}"
	for _, tt := range tests {
		v, ok := jsonrpc.GetString([]byte(obj), tt.key)
		if diff := cmp.Diff(got{v, ok}, tt.want); diff != "" {
			t.Errorf("GetString(%q) (-got +want):\n%s", tt.key, diff)
		}
	}
}

// FuzzGetString: GetString reads what json.Unmarshal of the member reads,
// whether it takes the plain fast path or not.
func FuzzGetString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"a\"b"`, `"\u00e9"`, "\"\xff\"", "\"é\"", `"tab\there"`, "\"ctl\x01\"", `""`, `"\ud800"`, `1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, val []byte) {
		obj := append(append([]byte(`{"k":`), val...), '}')
		got, ok := jsonrpc.GetString(obj, "k")
		var want string
		werr := json.Unmarshal(val, &want)
		if len(val) == 0 || val[0] != '"' || !json.Valid(obj) {
			return // not a string member: the decoder's errors decide
		}
		if werr != nil {
			t.Fatalf("json.Unmarshal(%q): %v", val, werr)
		}
		if !ok || got != want {
			t.Fatalf("GetString(%q) = %q, %v; json.Unmarshal reads %q", obj, got, ok, want)
		}
	})
}

func TestSet(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		key     string
		val     string
		want    string
		wantErr bool
	}{
		{name: "replace first", obj: `{"a":1,"b":2}`, key: "a", val: `"x"`, want: `{"a":"x","b":2}`},
		{name: "replace last", obj: `{"a":1,"b":2}`, key: "b", val: `[3]`, want: `{"a":1,"b":[3]}`},
		{name: "replace keeps surrounding whitespace", obj: "{ \"a\" : 1 ,\n \"b\" : 2 }", key: "b", val: `3`, want: "{ \"a\" : 1 ,\n \"b\" : 3 }"},
		{name: "replace nested value with scalar", obj: `{"a":{"x":[1,{"y":"}"}]},"b":2}`, key: "a", val: `null`, want: `{"a":null,"b":2}`},
		{name: "replace matches escaped key", obj: `{"\u006eame":"a__t"}`, key: "name", val: `"t"`, want: `{"\u006eame":"t"}`},
		{name: "repeated key: earlier copies removed", obj: `{"name":"a__safe","x":1,"name":"danger"}`, key: "name", val: `"safe"`, want: `{"x":1,"name":"safe"}`},
		{name: "repeated key three times", obj: `{"k":1, "k":2, "k":3}`, key: "k", val: `4`, want: `{"k":4}`},
		{name: "append to empty object", obj: `{}`, key: "k", val: `1`, want: `{"k":1}`},
		{name: "append to empty object with whitespace", obj: "{ \n }", key: "k", val: `1`, want: "{ \n \"k\":1}"},
		{name: "append to object", obj: `{"a":1}`, key: "k", val: `{"x":2}`, want: `{"a":1,"k":{"x":2}}`},
		{name: "append to object with whitespace", obj: "{ \"a\" : 1 \n}", key: "k", val: `1`, want: "{ \"a\" : 1 \n,\"k\":1}"},
		{name: "append after nested object", obj: `{"a":{"b":{}}}`, key: "k", val: `1`, want: `{"a":{"b":{}},"k":1}`},
		{name: "append keeps trailing whitespace", obj: "{\"a\":1}\n", key: "k", val: `2`, want: "{\"a\":1,\"k\":2}\n"},
		{name: "append escapes the key", obj: `{}`, key: "a\"b\n", val: `1`, want: `{"a\"b\n":1}`},
		{name: "nested key of the same name is not replaced", obj: `{"x":{"k":1}}`, key: "k", val: `2`, want: `{"x":{"k":1},"k":2}`},
		{name: "empty input means empty object", obj: ``, key: "k", val: `1`, want: `{"k":1}`},
		{name: "whitespace input means empty object", obj: " \n", key: "k", val: `1`, want: `{"k":1}`},
		{name: "array", obj: `[1]`, key: "k", val: `1`, wantErr: true},
		{name: "string", obj: `"{}"`, key: "k", val: `1`, wantErr: true},
		{name: "missing value", obj: `{"a":}`, key: "k", val: `1`, wantErr: true},
		{name: "unterminated", obj: `{"a":1`, key: "k", val: `1`, wantErr: true},
		{name: "unterminated after match", obj: `{"k":1,"a":`, key: "k", val: `2`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := jsonrpc.Set([]byte(tt.obj), tt.key, []byte(tt.val))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Set(%s, %q, %s) error = %v, want error %v", tt.obj, tt.key, tt.val, err, tt.wantErr)
			}
			if tt.wantErr {
				if !errors.Is(err, jsonrpc.ErrMalformed) {
					t.Errorf("Set error = %v, want ErrMalformed", err)
				}
				return
			}
			if diff := cmp.Diff(string(out), tt.want); diff != "" {
				t.Errorf("Set(%s, %q, %s) (-got +want):\n%s", tt.obj, tt.key, tt.val, diff)
			}
			if v, ok := jsonrpc.Get(out, tt.key); !ok || string(v) != tt.val {
				t.Errorf("Get after Set = %s, %v; want %s", v, ok, tt.val)
			}
			// Every decoder, whichever duplicate it keeps, reads val.
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("Set produced invalid JSON %s: %v", out, err)
			}
			if string(m[tt.key]) != tt.val {
				t.Errorf("json.Unmarshal of %s: %q = %s, want %s", out, tt.key, m[tt.key], tt.val)
			}
		})
	}
}

func TestSetDoesNotAliasInput(t *testing.T) {
	obj := []byte(`{"a":1,"b":2}`)
	orig := string(obj)
	out, err := jsonrpc.Set(obj[:len(obj):len(obj)], "a", []byte(`3`))
	if err != nil {
		t.Fatal(err)
	}
	out[1] = 'X'
	if diff := cmp.Diff(string(obj), orig); diff != "" {
		t.Errorf("input changed (-got +want):\n%s", diff)
	}
}

// member is one (key, raw value) pair reported by Fields.
type member struct{ Key, Val string }

func fields(t testing.TB, obj []byte) []member {
	t.Helper()
	var ms []member
	if err := jsonrpc.Fields(obj, func(k string, v []byte) bool {
		ms = append(ms, member{k, string(v)})
		return true
	}); err != nil {
		t.Fatalf("Fields(%s): %v", obj, err)
	}
	return ms
}

// TestSetKeepsOtherMembers is the splicing property: Set changes the
// member it names and no byte of any other member.
func TestSetKeepsOtherMembers(t *testing.T) {
	objs := []string{
		`{}`,
		`{"a":1}`,
		"{ \"a\" : 1 ,\n\t\"b\" : { \"c\" : [ 1, 2 ] } , \"s\" : \"x\\\"}{\" }",
		`{"name":"srv__tool","arguments":{"name":"inner","n":9007199254740993},"_meta":{"progressToken":7}}`,
		`{"\u006eame":"x","é":"\u00e9","":null}`,
	}
	keys := []string{"a", "b", "name", "_meta", "arguments", "new", "é", ""}
	for _, obj := range objs {
		for _, key := range keys {
			before := fields(t, []byte(obj))
			val := `{"set" : [ true ]}`
			out, err := jsonrpc.Set([]byte(obj), key, []byte(val))
			if err != nil {
				t.Fatalf("Set(%s, %q): %v", obj, key, err)
			}
			var want []member
			replaced := false
			for _, m := range before {
				if m.Key == key {
					m.Val, replaced = val, true
				}
				want = append(want, m)
			}
			if !replaced {
				want = append(want, member{key, val})
			}
			if diff := cmp.Diff(fields(t, out), want); diff != "" {
				t.Errorf("Set(%s, %q) members (-got +want):\n%s", obj, key, diff)
			}
		}
	}
}

func TestSetPath(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		keys    []string
		want    string
		wantErr bool
	}{
		{name: "one key", obj: `{"a":1}`, keys: []string{"a"}, want: `{"a":"v"}`},
		{name: "creates nested objects", obj: `{}`, keys: []string{"_meta", "progressToken"}, want: `{"_meta":{"progressToken":"v"}}`},
		{name: "creates in empty input", obj: ``, keys: []string{"a", "b", "c"}, want: `{"a":{"b":{"c":"v"}}}`},
		{name: "into existing object", obj: `{"_meta":{ "x" : 1 },"y":2}`, keys: []string{"_meta", "progressToken"}, want: `{"_meta":{ "x" : 1 ,"progressToken":"v"},"y":2}`},
		{name: "replace in existing object", obj: `{"_meta":{"progressToken":1, "x":2}}`, keys: []string{"_meta", "progressToken"}, want: `{"_meta":{"progressToken":"v", "x":2}}`},
		{name: "replaces null", obj: `{"_meta":null}`, keys: []string{"_meta", "progressToken"}, want: `{"_meta":{"progressToken":"v"}}`},
		{name: "replaces a scalar", obj: `{"_meta":5,"z":0}`, keys: []string{"_meta", "progressToken"}, want: `{"_meta":{"progressToken":"v"},"z":0}`},
		{name: "replaces an array", obj: `{"ref":[1]}`, keys: []string{"ref", "name"}, want: `{"ref":{"name":"v"}}`},
		{name: "no keys", obj: `{}`, keys: nil, wantErr: true},
		{name: "not an object", obj: `[]`, keys: []string{"a", "b"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := jsonrpc.SetPath([]byte(tt.obj), []byte(`"v"`), tt.keys...)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SetPath(%s, %q) error = %v, want error %v", tt.obj, tt.keys, err, tt.wantErr)
			}
			if diff := cmp.Diff(string(out), tt.want); diff != "" {
				t.Errorf("SetPath(%s, %q) (-got +want):\n%s", tt.obj, tt.keys, diff)
			}
		})
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name    string
		obj     string
		key     string
		want    string
		wantErr bool
	}{
		{name: "first", obj: `{"a":1,"b":2,"c":3}`, key: "a", want: `{"b":2,"c":3}`},
		{name: "middle", obj: `{"a":1,"b":2,"c":3}`, key: "b", want: `{"a":1,"c":3}`},
		{name: "last", obj: `{"a":1,"b":2,"c":3}`, key: "c", want: `{"a":1,"b":2}`},
		{name: "only", obj: `{"a":1}`, key: "a", want: `{}`},
		{name: "first with whitespace", obj: "{ \"a\" : 1 ,\n \"b\" : 2 }", key: "a", want: "{ \"b\" : 2 }"},
		{name: "middle with whitespace", obj: "{ \"a\" : 1 , \"b\" : 2 , \"c\" : 3 }", key: "b", want: "{ \"a\" : 1 , \"c\" : 3 }"},
		{name: "last with whitespace", obj: "{ \"a\" : 1 ,\n \"b\" : 2 \n}", key: "b", want: `{ "a" : 1 }`},
		{name: "only with whitespace", obj: `{ "a" : 1 }`, key: "a", want: `{ }`},
		{name: "nested value", obj: `{"a":{"b":[1,{"c":"}"}]},"d":4}`, key: "a", want: `{"d":4}`},
		{name: "escaped key", obj: `{"\u0061":1,"b":2}`, key: "a", want: `{"b":2}`},
		{name: "missing key leaves object alone", obj: `{ "a" : 1 }`, key: "z", want: `{ "a" : 1 }`},
		{name: "nested key of the same name is kept", obj: `{"x":{"a":1}}`, key: "a", want: `{"x":{"a":1}}`},
		{name: "repeated key: every copy removed", obj: `{"a":1,"b":2,"a":3,"a":4}`, key: "a", want: `{"b":2}`},
		{name: "repeated key only", obj: `{"a":1,"a":2}`, key: "a", want: `{}`},
		{name: "not an object", obj: `[1]`, key: "a", wantErr: true},
		{name: "malformed", obj: `{"a":1,`, key: "a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := jsonrpc.Delete([]byte(tt.obj), tt.key)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Delete(%s, %q) error = %v, want error %v", tt.obj, tt.key, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(string(out), tt.want); diff != "" {
				t.Errorf("Delete(%s, %q) (-got +want):\n%s", tt.obj, tt.key, diff)
			}
			if !json.Valid(out) {
				t.Errorf("Delete produced invalid JSON %s", out)
			}
		})
	}
}

func TestElements(t *testing.T) {
	tests := []struct {
		name    string
		arr     string
		want    []string
		wantErr bool
	}{
		{name: "empty", arr: `[]`},
		{name: "empty with whitespace", arr: " [ \n ] "},
		{name: "scalars", arr: `[1,"a",true,null,-1.5e3]`, want: []string{"1", `"a"`, "true", "null", "-1.5e3"}},
		{name: "nested values", arr: ` [ {"x":[1,2],"y":"]"} , [ [3] ] ,"a,b", "\"]" ] `, want: []string{`{"x":[1,2],"y":"]"}`, `[ [3] ]`, `"a,b"`, `"\"]"`}},
		{name: "tools list", arr: `[{"name":"a","inputSchema":{"type":"object"}},{"name":"b"}]`, want: []string{`{"name":"a","inputSchema":{"type":"object"}}`, `{"name":"b"}`}},
		{name: "object", arr: `{}`, wantErr: true},
		{name: "empty input", arr: ``, wantErr: true},
		{name: "trailing comma", arr: `[1,]`, want: []string{"1"}, wantErr: true},
		{name: "missing comma", arr: `[1 2]`, want: []string{"1"}, wantErr: true},
		{name: "unterminated", arr: `[1`, want: []string{"1"}, wantErr: true},
		{name: "unterminated nested", arr: `[{"a":1]`, want: []string{`{"a":1]`}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := jsonrpc.Elements([]byte(tt.arr), func(e []byte) bool {
				got = append(got, string(e))
				return true
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Elements(%s) error = %v, want error %v", tt.arr, err, tt.wantErr)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Elements(%s) (-got +want):\n%s", tt.arr, diff)
			}
		})
	}
}

func TestElementsStops(t *testing.T) {
	var got []string
	err := jsonrpc.Elements([]byte(`[1,2,3`), func(e []byte) bool {
		got = append(got, string(e))
		return len(got) < 2
	})
	if err != nil {
		t.Fatalf("Elements stopped early: %v", err)
	}
	if diff := cmp.Diff(got, []string{"1", "2"}); diff != "" {
		t.Errorf("Elements (-got +want):\n%s", diff)
	}
}

func TestFields(t *testing.T) {
	obj := []byte(" { \"b\" : 1 , \"a\\u0041\" : { \"x\" : [ ] } , \"\" : \"s\" } ")
	want := []member{{"b", "1"}, {"aA", `{ "x" : [ ] }`}, {"", `"s"`}}
	if diff := cmp.Diff(fields(t, obj), want); diff != "" {
		t.Errorf("Fields (-got +want):\n%s", diff)
	}
	var n int
	if err := jsonrpc.Fields(obj, func(string, []byte) bool { n++; return false }); err != nil || n != 1 {
		t.Errorf("Fields stopping at first member: %d calls, error %v", n, err)
	}
	for _, bad := range []string{``, `[]`, `{"a"}`, `{"a":1 "b":2}`, `{a:1}`, `{"a":1,}`} {
		if err := jsonrpc.Fields([]byte(bad), func(string, []byte) bool { return true }); err == nil {
			t.Errorf("Fields(%s) = nil error, want ErrMalformed", bad)
		}
	}
}

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{"", `""`},
		{"a\"b\\c", `"a\"b\\c"`},
		{"\n\t\x00", `"\n\t\u0000"`},
		{"é", `"é"`},
		{"<&>", `"<&>"`},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(string(jsonrpc.String(tt.in)), tt.want); diff != "" {
			t.Errorf("String(%q) (-got +want):\n%s", tt.in, diff)
		}
		if diff := cmp.Diff(string(jsonrpc.AppendString([]byte("x"), tt.in)), "x"+tt.want); diff != "" {
			t.Errorf("AppendString(%q) (-got +want):\n%s", tt.in, diff)
		}
	}
}

func FuzzRaw(f *testing.F) {
	seeds := []struct{ obj, key, val string }{
		{`{"a":1,"b":2}`, "a", `"x"`},
		{`{}`, "k", `1`},
		{"{ \n }", "k", `{"x":[1]}`},
		{`{"name":"a","name":"b"}`, "name", `"c"`},
		{`{"\u006eame":"x"}`, "name", `null`},
		{`{"s":"a\"b\\","t":{"u":"}"}}`, "t", `[]`},
		{`{"_meta":{"progressToken":1}}`, "_meta", `{"progressToken":"up-1"}`},
		{"{\"\xff\":1}", "\ufffd", `2`},
		{`[1,{"a":[2]},"x"]`, "a", `1`},
		{`{"a":`, "a", `1`},
		{`{"a":"\`, "a", `1`},
		{``, "", ``},
	}
	for _, s := range seeds {
		f.Add([]byte(s.obj), s.key, []byte(s.val))
	}
	f.Fuzz(func(t *testing.T, obj []byte, key string, val []byte) {
		// Nothing panics, whatever the input.
		_, _ = jsonrpc.Get(obj, key)
		_, _ = jsonrpc.GetPath(obj, key, key)
		_, _ = jsonrpc.GetString(obj, key)
		_, _ = jsonrpc.Set(obj, key, val)
		_, _ = jsonrpc.SetPath(obj, val, key, key)
		_, _ = jsonrpc.Delete(obj, key)
		_ = jsonrpc.Elements(obj, func([]byte) bool { return true })
		_ = jsonrpc.Fields(obj, func(string, []byte) bool { return true })

		trimmed := bytes.Trim(obj, " \t\r\n")
		if !json.Valid(trimmed) || trimmed[0] != '{' || !utf8.ValidString(key) {
			return
		}
		v := bytes.Trim(val, " \t\r\n")
		if !json.Valid(v) {
			v = jsonrpc.String(string(val))
		}
		out, err := jsonrpc.Set(obj, key, v)
		if err != nil {
			t.Fatalf("Set(%q, %q, %q): %v", obj, key, v, err)
		}
		if !json.Valid(out) {
			t.Fatalf("Set(%q, %q, %q) = %q, not valid JSON", obj, key, v, out)
		}
		if g, ok := jsonrpc.Get(out, key); !ok || !bytes.Equal(g, v) {
			t.Fatalf("Get(Set(%q, %q, %q)) = %q, %v", obj, key, v, g, ok)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("Unmarshal(%q): %v", out, err)
		}
		if !bytes.Equal(m[key], v) {
			t.Fatalf("Set(%q, %q, %q) = %q; json.Unmarshal reads %q", obj, key, v, out, m[key])
		}
		// No other member changes.
		others := func(b []byte) []member {
			var ms []member
			for _, m := range fields(t, b) {
				if m.Key != key {
					ms = append(ms, m)
				}
			}
			return ms
		}
		if diff := cmp.Diff(others(out), others(obj)); diff != "" {
			t.Fatalf("Set(%q, %q) changed other members (-got +want):\n%s", obj, key, diff)
		}

		del, err := jsonrpc.Delete(obj, key)
		if err != nil {
			t.Fatalf("Delete(%q, %q): %v", obj, key, err)
		}
		if !json.Valid(del) {
			t.Fatalf("Delete(%q, %q) = %q, not valid JSON", obj, key, del)
		}
		if _, ok := jsonrpc.Get(del, key); ok {
			t.Fatalf("Delete(%q, %q) = %q still has the key", obj, key, del)
		}
		if diff := cmp.Diff(others(del), others(obj)); diff != "" {
			t.Fatalf("Delete(%q, %q) changed other members (-got +want):\n%s", obj, key, diff)
		}
	})
}

// SetShared returns what Set does, and obj itself when that is obj byte
// for byte (the key once, with val's bytes), never when a repeated key
// or another value makes Set write a new object.
func TestSetShared(t *testing.T) {
	for _, tc := range []struct {
		obj, val string
		same     bool
	}{
		{`{"name":"echo","arguments":{}}`, `"echo"`, true},
		{`{"name": "echo" }`, `"echo"`, true},
		{`{"name":"echo","name":"echo"}`, `"echo"`, false},
		{`{"name":"other"}`, `"echo"`, false},
		{`{"na\u006de":"echo"}`, `"echo"`, true},
		{`{"arguments":{}}`, `"echo"`, false},
		{``, `"echo"`, false},
	} {
		obj := []byte(tc.obj)
		want, werr := jsonrpc.Set([]byte(tc.obj), "name", []byte(tc.val))
		got, gerr := jsonrpc.SetShared(obj, "name", []byte(tc.val))
		if string(got) != string(want) || (werr == nil) != (gerr == nil) {
			t.Errorf("%s: SetShared %q %v, Set %q %v", tc.obj, got, gerr, want, werr)
		}
		if same := len(got) > 0 && len(obj) > 0 && &got[0] == &obj[0]; same != tc.same {
			t.Errorf("%s: shared %v, want %v", tc.obj, same, tc.same)
		}
	}
}
