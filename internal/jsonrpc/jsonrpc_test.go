package jsonrpc_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// cmpID compares ids by their exact JSON text.
var cmpID = cmp.Comparer(func(a, b jsonrpc.ID) bool { return a == b })

func rawID(t testing.TB, raw string) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.RawID([]byte(raw))
	if err != nil {
		t.Fatalf("RawID(%q): %v", raw, err)
	}
	return id
}

// decoded is what Decode made of some bytes: a message, or the code and
// recovered id of its DecodeError.
type decoded struct {
	Msg     *jsonrpc.Message
	ErrCode int64
	ErrID   string
}

func decode(t testing.TB, data []byte) decoded {
	t.Helper()
	m, err := jsonrpc.Decode(data)
	if err == nil {
		return decoded{Msg: m}
	}
	var de *jsonrpc.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Decode(%q): error %T %v is not a *DecodeError", data, err, err)
	}
	return decoded{ErrCode: de.Code, ErrID: de.ID.Raw()}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }

// decodeTests are shared with the fuzz corpus.
var decodeTests = []struct {
	name string
	in   string
	want func(t testing.TB) decoded
}{
	// Requests.
	{"request", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(rawID(t, "1"), "tools/list", nil)}
	}},
	{"request members in any order", `{"method":"ping","id":"x","jsonrpc":"2.0"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.StringID("x"), "ping", nil)}
	}},
	{"request whitespace around and inside envelope", " \r\n\t{ \"jsonrpc\" : \"2.0\" ,\n \"id\" : 7 , \"method\" : \"ping\" }\n ", func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(7), "ping", nil)}
	}},
	{"request params object kept verbatim", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{ "name" : "x",  "arguments":{"b":1,"a":2} }}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(2), "tools/call", raw(`{ "name" : "x",  "arguments":{"b":1,"a":2} }`))}
	}},
	{"request params array", `{"jsonrpc":"2.0","id":2,"method":"m","params":[1, "two" ,{}]}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(2), "m", raw(`[1, "two" ,{}]`))}
	}},
	{"request params null is absent", `{"jsonrpc":"2.0","id":2,"method":"m","params":null}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(2), "m", nil)}
	}},
	{"request big number id kept exactly", `{"jsonrpc":"2.0","id":9007199254740993,"method":"m"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(rawID(t, "9007199254740993"), "m", nil)}
	}},
	{"request number id text kept", `{"jsonrpc":"2.0","id":-1.50e3,"method":"m"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(rawID(t, "-1.50e3"), "m", nil)}
	}},
	{"request string id with escapes kept", `{"jsonrpc":"2.0","id":"a\"b\u00e9","method":"m"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(rawID(t, `"a\"b\u00e9"`), "m", nil)}
	}},
	{"request empty string id", `{"jsonrpc":"2.0","id":"","method":"m"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(rawID(t, `""`), "m", nil)}
	}},
	{"request method with escapes", `{"jsonrpc":"2.0","id":1,"method":"a\/b\u00e9"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(1), "a/bé", nil)}
	}},
	{"repeated member: last wins", `{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(1), "b", nil)}
	}},
	{"unknown members ignored", `{"jsonrpc":"2.0","id":1,"method":"m","extra":{"a":[1]}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(1), "m", nil)}
	}},

	// Notifications.
	{"notification", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewNotification("notifications/initialized", nil)}
	}},
	{"notification with params", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":0.5}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewNotification("notifications/progress", raw(`{"progressToken":"t","progress":0.5}`))}
	}},

	// Responses.
	{"result", `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewResult(jsonrpc.Int64ID(1), raw(`{"tools":[]}`))}
	}},
	{"result null", `{"jsonrpc":"2.0","id":"r","result":null}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewResult(jsonrpc.StringID("r"), raw(`null`))}
	}},
	{"result big numbers and unicode kept", `{"jsonrpc":"2.0","id":9007199254740993,"result":{"n":12345678901234567890,"f":1e400,"s":"é\u00e9\n"}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewResult(rawID(t, "9007199254740993"), raw(`{"n":12345678901234567890,"f":1e400,"s":"é\u00e9\n"}`))}
	}},
	{"error with data", `{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"Method not found","data":{ "method" : "x" }}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewErrorResponse(jsonrpc.Int64ID(3), &jsonrpc.Error{Code: -32601, Message: "Method not found", Data: raw(`{ "method" : "x" }`)})}
	}},
	{"error data null kept", `{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m","data":null}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewErrorResponse(jsonrpc.Int64ID(3), &jsonrpc.Error{Code: 1, Message: "m", Data: raw(`null`)})}
	}},
	{"error null id", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewErrorResponse(jsonrpc.ID{}, &jsonrpc.Error{Code: -32700, Message: "Parse error"})}
	}},
	{"error without id", `{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewErrorResponse(jsonrpc.ID{}, &jsonrpc.Error{Code: -32600, Message: "Invalid Request"})}
	}},
	{"error members other than code message data dropped", `{"jsonrpc":"2.0","id":1,"error":{"message":"m","x":1,"code":5,"Data":2}}`, func(t testing.TB) decoded {
		return decoded{Msg: jsonrpc.NewErrorResponse(jsonrpc.Int64ID(1), &jsonrpc.Error{Code: 5, Message: "m"})}
	}},

	// Not JSON.
	{"empty", ``, parseError},
	{"whitespace only", " \n\t", parseError},
	{"truncated", `{"jsonrpc":"2.0","id":1,"method":"m"`, parseError},
	{"trailing comma", `{"jsonrpc":"2.0","id":1,"method":"m",}`, parseError},
	{"trailing garbage", `{"jsonrpc":"2.0","id":1,"method":"m"} x`, parseError},
	{"two messages", `{"jsonrpc":"2.0","method":"m"}{"jsonrpc":"2.0","method":"m"}`, parseError},
	{"bare word", `nul`, parseError},
	{"single quotes", `{'jsonrpc':'2.0'}`, parseError},
	{"unicode space is not JSON whitespace", "\u00a0{\"jsonrpc\":\"2.0\",\"method\":\"m\"}", parseError},
	{"bad escape", `{"jsonrpc":"2.0","method":"\x"}`, parseError},

	// JSON but not JSON-RPC.
	{"number", `42`, invalid("")},
	{"string", `"x"`, invalid("")},
	{"null", `null`, invalid("")},
	{"array where object expected", `[{"jsonrpc":"2.0","method":"m"}]`, invalid("")},
	{"empty object", `{}`, invalid("")},
	{"missing jsonrpc", `{"id":1,"method":"m"}`, invalid("1")},
	{"jsonrpc 1.0", `{"jsonrpc":"1.0","id":"a","method":"m"}`, invalid(`"a"`)},
	{"jsonrpc number", `{"jsonrpc":2.0,"id":1,"method":"m"}`, invalid("1")},
	{"jsonrpc name is case-sensitive", `{"JSONRPC":"2.0","id":1,"method":"m"}`, invalid("1")},
	{"method name is case-sensitive", `{"jsonrpc":"2.0","id":1,"Method":"m"}`, invalid("1")},
	{"id name is case-sensitive", `{"jsonrpc":"2.0","ID":1,"result":{}}`, invalid("")},
	{"method not a string", `{"jsonrpc":"2.0","id":1,"method":5}`, invalid("1")},
	{"method null", `{"jsonrpc":"2.0","id":1,"method":null}`, invalid("1")},
	{"method empty", `{"jsonrpc":"2.0","id":1,"method":""}`, invalid("1")},
	{"params a number", `{"jsonrpc":"2.0","id":1,"method":"m","params":5}`, invalid("1")},
	{"params a string", `{"jsonrpc":"2.0","id":"s","method":"m","params":"x"}`, invalid(`"s"`)},
	{"params a bool", `{"jsonrpc":"2.0","method":"m","params":true}`, invalid("")},
	{"request with result", `{"jsonrpc":"2.0","id":1,"method":"m","result":{}}`, invalid("1")},
	{"request with error", `{"jsonrpc":"2.0","id":1,"method":"m","error":{"code":1,"message":"x"}}`, invalid("1")},
	{"request with null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call"}`, invalid("")},
	{"both result and error", `{"jsonrpc":"2.0","id":4,"result":{},"error":{"code":1,"message":"x"}}`, invalid("4")},
	{"neither method result nor error", `{"jsonrpc":"2.0","id":5}`, invalid("5")},
	{"result without id", `{"jsonrpc":"2.0","result":{}}`, invalid("")},
	{"result with null id", `{"jsonrpc":"2.0","id":null,"result":{}}`, invalid("")},
	{"error not an object", `{"jsonrpc":"2.0","id":6,"error":"boom"}`, invalid("6")},
	{"error an array", `{"jsonrpc":"2.0","id":6,"error":[1]}`, invalid("6")},
	{"error code a string", `{"jsonrpc":"2.0","id":6,"error":{"code":"1","message":"x"}}`, invalid("6")},
	{"error code fractional", `{"jsonrpc":"2.0","id":6,"error":{"code":1.5,"message":"x"}}`, invalid("6")},
	{"error message a number", `{"jsonrpc":"2.0","id":6,"error":{"code":1,"message":2}}`, invalid("6")},
	{"id an object", `{"jsonrpc":"2.0","id":{"a":1},"method":"m"}`, invalid("")},
	{"id an array", `{"jsonrpc":"2.0","id":[1],"method":"m"}`, invalid("")},
	{"id a bool", `{"jsonrpc":"2.0","id":true,"method":"m"}`, invalid("")},
	{"id a bool on a response", `{"jsonrpc":"2.0","id":false,"result":{}}`, invalid("")},
}

func parseError(testing.TB) decoded { return decoded{ErrCode: jsonrpc.CodeParseError} }

func invalid(id string) func(testing.TB) decoded {
	return func(testing.TB) decoded { return decoded{ErrCode: jsonrpc.CodeInvalidRequest, ErrID: id} }
}

func TestDecode(t *testing.T) {
	for _, tt := range decodeTests {
		t.Run(tt.name, func(t *testing.T) {
			got := decode(t, []byte(tt.in))
			if diff := cmp.Diff(got, tt.want(t), cmpID); diff != "" {
				t.Errorf("Decode(%s) (-got +want):\n%s", tt.in, diff)
			}
		})
	}
}

func TestDecodeShapes(t *testing.T) {
	type shape struct{ Request, Notification, Response bool }
	tests := []struct {
		in   string
		want shape
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"m"}`, shape{Request: true}},
		{`{"jsonrpc":"2.0","id":"","method":"m"}`, shape{Request: true}},
		{`{"jsonrpc":"2.0","id":0,"method":"m"}`, shape{Request: true}},
		{`{"jsonrpc":"2.0","method":"m"}`, shape{Notification: true}},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, shape{Response: true}},
		{`{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":""}}`, shape{Response: true}},
	}
	for _, tt := range tests {
		m, err := jsonrpc.Decode([]byte(tt.in))
		if err != nil {
			t.Fatalf("Decode(%s): %v", tt.in, err)
		}
		got := shape{m.IsRequest(), m.IsNotification(), m.IsResponse()}
		if diff := cmp.Diff(got, tt.want); diff != "" {
			t.Errorf("Decode(%s) shape (-got +want):\n%s", tt.in, diff)
		}
	}
}

func TestDecodeErrorRPCError(t *testing.T) {
	_, err := jsonrpc.Decode([]byte(`{"jsonrpc":"1.0","id":9,"method":"m"}`))
	var de *jsonrpc.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Decode: error %v is not a *DecodeError", err)
	}
	got := jsonrpc.Encode(jsonrpc.NewErrorResponse(de.ID, de.RPCError()))
	want := `{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"Invalid Request: \"jsonrpc\" must be \"2.0\""}}`
	if diff := cmp.Diff(string(got), want); diff != "" {
		t.Errorf("error response (-got +want):\n%s", diff)
	}
}

func TestRawID(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: ``, want: ``},
		{in: ` `, want: ``},
		{in: `1`, want: `1`},
		{in: ` 9007199254740993 `, want: `9007199254740993`},
		{in: `-0.5e-3`, want: `-0.5e-3`},
		{in: `"a\u0041"`, want: `"a\u0041"`},
		{in: `"a`, wantErr: true},
		{in: `"a" "b"`, wantErr: true},
		{in: `01`, wantErr: true},
		{in: `-`, wantErr: true},
		{in: `1 2`, wantErr: true},
		{in: `null`, wantErr: true},
		{in: `true`, wantErr: true},
		{in: `{}`, wantErr: true},
		{in: `[1]`, wantErr: true},
	}
	for _, tt := range tests {
		id, err := jsonrpc.RawID([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("RawID(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if diff := cmp.Diff(id.Raw(), tt.want); diff != "" {
			t.Errorf("RawID(%q) (-got +want):\n%s", tt.in, diff)
		}
		if got, want := id.IsValid(), tt.want != ""; got != want {
			t.Errorf("RawID(%q).IsValid() = %v, want %v", tt.in, got, want)
		}
	}
}

func TestIDConstructors(t *testing.T) {
	tests := []struct {
		id   jsonrpc.ID
		want string
	}{
		{jsonrpc.Int64ID(0), `0`},
		{jsonrpc.Int64ID(-42), `-42`},
		{jsonrpc.StringID(""), `""`},
		{jsonrpc.StringID(`a"b`), `"a\"b"`},
		{jsonrpc.ID{}, ``},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.id.Raw(), tt.want); diff != "" {
			t.Errorf("id (-got +want):\n%s", diff)
		}
		wantJSON := tt.want
		if wantJSON == "" {
			wantJSON = "null"
		}
		got, err := tt.id.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(got), wantJSON); diff != "" {
			t.Errorf("MarshalJSON (-got +want):\n%s", diff)
		}
	}
}

func TestDecodeBatch(t *testing.T) {
	type elem struct {
		Msg     *jsonrpc.Message
		ErrCode int64
		ErrID   string
	}
	type result struct {
		Elems   []elem
		ErrCode int64
	}
	run := func(t *testing.T, in string) result {
		msgs, errs, err := jsonrpc.DecodeBatch([]byte(in))
		if err != nil {
			var de *jsonrpc.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("DecodeBatch: error %T %v is not a *DecodeError", err, err)
			}
			return result{ErrCode: de.Code}
		}
		if len(msgs) != len(errs) {
			t.Fatalf("DecodeBatch: %d messages, %d errors", len(msgs), len(errs))
		}
		var r result
		for i := range msgs {
			e := elem{Msg: msgs[i]}
			if errs[i] != nil {
				if msgs[i] != nil {
					t.Errorf("element %d: both a message and an error", i)
				}
				var de *jsonrpc.DecodeError
				if !errors.As(errs[i], &de) {
					t.Fatalf("element %d: error %T is not a *DecodeError", i, errs[i])
				}
				e.ErrCode, e.ErrID = de.Code, de.ID.Raw()
			}
			r.Elems = append(r.Elems, e)
		}
		return r
	}
	tests := []struct {
		name string
		in   string
		want result
	}{
		{"empty batch", `[]`, result{ErrCode: jsonrpc.CodeInvalidRequest}},
		{"empty batch with whitespace", "[ \n ]", result{ErrCode: jsonrpc.CodeInvalidRequest}},
		{"not JSON", `[{"jsonrpc":"2.0"`, result{ErrCode: jsonrpc.CodeParseError}},
		{"an object", `{"jsonrpc":"2.0","method":"m"}`, result{ErrCode: jsonrpc.CodeInvalidRequest}},
		{"a string", `"[]"`, result{ErrCode: jsonrpc.CodeInvalidRequest}},
		{"one request", `[{"jsonrpc":"2.0","id":1,"method":"m"}]`, result{Elems: []elem{
			{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(1), "m", nil)},
		}}},
		{"mixed", `[
			{"jsonrpc":"2.0","id":1,"method":"a","params":{ "x" : 1 }},
			{"jsonrpc":"2.0","method":"n"},
			1,
			{"jsonrpc":"2.0","id":"r","result":{}},
			{"foo":"bar","id":7},
			{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}},
			[]
		]`, result{Elems: []elem{
			{Msg: jsonrpc.NewRequest(jsonrpc.Int64ID(1), "a", raw(`{ "x" : 1 }`))},
			{Msg: jsonrpc.NewNotification("n", nil)},
			{ErrCode: jsonrpc.CodeInvalidRequest},
			{Msg: jsonrpc.NewResult(jsonrpc.StringID("r"), raw(`{}`))},
			{ErrCode: jsonrpc.CodeInvalidRequest, ErrID: "7"},
			{Msg: jsonrpc.NewErrorResponse(jsonrpc.ID{}, &jsonrpc.Error{Code: -32700, Message: "Parse error"})},
			{ErrCode: jsonrpc.CodeInvalidRequest},
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, tt.in)
			if diff := cmp.Diff(got, tt.want, cmpID); diff != "" {
				t.Errorf("DecodeBatch(%s) (-got +want):\n%s", tt.in, diff)
			}
		})
	}
}

func TestIsBatch(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{`[]`, true},
		{" \r\n\t[{}]", true},
		{`{}`, false},
		{``, false},
		{`  `, false},
		{`"["`, false},
	}
	for _, tt := range tests {
		if got := jsonrpc.IsBatch([]byte(tt.in)); got != tt.want {
			t.Errorf("IsBatch(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		name string
		m    *jsonrpc.Message
		want string
	}{
		{"request", jsonrpc.NewRequest(jsonrpc.Int64ID(1), "tools/list", nil),
			`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`},
		{"request string id and params", jsonrpc.NewRequest(jsonrpc.StringID("a"), "tools/call", raw(`{ "name":"x" }`)),
			`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{ "name":"x" }}`},
		{"notification", jsonrpc.NewNotification("notifications/initialized", nil),
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"method needing escapes", jsonrpc.NewNotification("a\"b\\c\n", nil),
			`{"jsonrpc":"2.0","method":"a\"b\\c\n"}`},
		{"method with unicode", jsonrpc.NewNotification("é", nil),
			`{"jsonrpc":"2.0","method":"é"}`},
		{"result defaults to empty object", jsonrpc.NewResult(jsonrpc.Int64ID(2), nil),
			`{"jsonrpc":"2.0","id":2,"result":{}}`},
		{"result kept verbatim", jsonrpc.NewResult(jsonrpc.Int64ID(2), raw(`{"b" : 1, "a":[ 9007199254740993 ]}`)),
			`{"jsonrpc":"2.0","id":2,"result":{"b" : 1, "a":[ 9007199254740993 ]}}`},
		{"error without id", jsonrpc.NewErrorResponse(jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeParseError, "Parse error")),
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{"error with data", jsonrpc.NewErrorResponse(jsonrpc.Int64ID(3), &jsonrpc.Error{Code: -32042, Message: "m", Data: raw(`{ "elicitations" : [] }`)}),
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32042,"message":"m","data":{ "elicitations" : [] }}}`},
		{"error message formatted", jsonrpc.NewErrorResponse(jsonrpc.Int64ID(3), jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "no %s %d%%", "x", 1)),
			`{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"no x 1%"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(jsonrpc.Encode(tt.m))
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Encode (-got +want):\n%s", diff)
			}
			if got := string(tt.m.Append([]byte("prefix"))); got != "prefix"+tt.want {
				t.Errorf("Append = %s, want prefix%s", got, tt.want)
			}
			back, err := jsonrpc.Decode([]byte(tt.want))
			if err != nil {
				t.Fatalf("Decode(Encode(m)): %v", err)
			}
			if diff := cmp.Diff(back, tt.m, cmpID); diff != "" {
				t.Errorf("Decode(Encode(m)) (-got +want):\n%s", diff)
			}
		})
	}
}

func TestEncodeBatch(t *testing.T) {
	got := string(jsonrpc.EncodeBatch([]*jsonrpc.Message{
		jsonrpc.NewResult(jsonrpc.Int64ID(1), raw(`[]`)),
		jsonrpc.NewNotification("n", nil),
	}))
	want := `[{"jsonrpc":"2.0","id":1,"result":[]},{"jsonrpc":"2.0","method":"n"}]`
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("EncodeBatch (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(string(jsonrpc.EncodeBatch(nil)), `[]`); diff != "" {
		t.Errorf("EncodeBatch(nil) (-got +want):\n%s", diff)
	}
}

// TestRoundTrip decodes wire text, re-encodes it and checks that only the
// envelope changed: ids and payloads keep their exact bytes.
func TestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // canonical envelope, payload bytes unchanged
	}{
		{"params whitespace, key order, escapes and big id",
			"{ \"params\" : {\"z\":1, \"a\" : [1, 2,\n 3], \"s\":\"\\u00e9\\n\\\"}{\", \"u\":\"é\"}, \"method\":\"x\", \"id\": 9007199254740993 , \"jsonrpc\":\"2.0\"}",
			"{\"jsonrpc\":\"2.0\",\"id\":9007199254740993,\"method\":\"x\",\"params\":{\"z\":1, \"a\" : [1, 2,\n 3], \"s\":\"\\u00e9\\n\\\"}{\", \"u\":\"é\"}}"},
		{"result with big numbers",
			`{"jsonrpc":"2.0","result":{ "n" : 12345678901234567890 , "f" : 1.0e+400 },"id":"q\u0022"}`,
			`{"jsonrpc":"2.0","id":"q\u0022","result":{ "n" : 12345678901234567890 , "f" : 1.0e+400 }}`},
		{"result scalar",
			`{"jsonrpc":"2.0","id":1,"result":"text"}`,
			`{"jsonrpc":"2.0","id":1,"result":"text"}`},
		{"error data kept",
			`{"error":{"data":[ {"k":"v"} , 2 ],"message":"bad \u2028 thing","code":-32602},"id":4,"jsonrpc":"2.0"}`,
			"{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32602,\"message\":\"bad \\u2028 thing\",\"data\":[ {\"k\":\"v\"} , 2 ]}}"},
		{"notification params array",
			`{"jsonrpc":"2.0","method":"notifications/x","params":[ ]}`,
			`{"jsonrpc":"2.0","method":"notifications/x","params":[ ]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := jsonrpc.Decode([]byte(tt.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			enc := jsonrpc.Encode(m)
			if diff := cmp.Diff(string(enc), tt.want); diff != "" {
				t.Errorf("Encode(Decode(in)) (-got +want):\n%s", diff)
			}
			m2, err := jsonrpc.Decode(enc)
			if err != nil {
				t.Fatalf("Decode(Encode(m)): %v", err)
			}
			if diff := cmp.Diff(m2, m, cmpID); diff != "" {
				t.Errorf("Decode(Encode(m)) (-got +want):\n%s", diff)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, tt := range decodeTests {
		f.Add([]byte(tt.in))
	}
	for _, s := range []string{
		`[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","method":"n"}]`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"\ud800"}`,
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"\u0000","data":"\\"}}`,
		`{"jsonrpc":"2.0","\u0069d":1,"method":"m"}`,
		`{"jsonrpc":"2.0","id":1e999,"result":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := jsonrpc.Decode(data)
		_, _, _ = jsonrpc.DecodeBatch(data)
		if err != nil {
			var de *jsonrpc.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode: error %T %v is not a *DecodeError", err, err)
			}
			trimmed := bytes.Trim(data, " \t\r\n")
			wantCode := int64(jsonrpc.CodeInvalidRequest)
			if !json.Valid(trimmed) {
				wantCode = jsonrpc.CodeParseError
			}
			if de.Code != wantCode {
				t.Fatalf("Decode(%q): code %d, want %d", data, de.Code, wantCode)
			}
			return
		}
		enc := jsonrpc.Encode(m)
		if !json.Valid(enc) {
			t.Fatalf("Encode produced invalid JSON %q from %q", enc, data)
		}
		m2, err := jsonrpc.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(m)) = %v; input %q, encoding %q", err, data, enc)
		}
		if diff := cmp.Diff(m2, m, cmpID); diff != "" {
			t.Fatalf("Decode(Encode(m)) (-got +want):\n%s\ninput %q", diff, data)
		}
		if enc2 := jsonrpc.Encode(m2); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding not stable: %q then %q", enc, enc2)
		}
		if m.IsRequest() == m.IsNotification() && !m.IsResponse() {
			t.Fatalf("message %q has no single shape", enc)
		}
	})
}

// Valid JSON nested deeper than the decoder allows is a parse error that
// says so, not "invalid JSON"; at the limit it decodes.
func TestDecodeTooDeep(t *testing.T) {
	nested := func(n int) string {
		return `{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":` + strings.Repeat("[", n-2) + strings.Repeat("]", n-2) + `}}`
	}
	const deep = "Parse error: JSON nested deeper than 10000 levels"
	tests := []struct {
		name, data, want string
	}{
		{"at the limit", nested(jsonrpc.MaxDepth), ""},
		{"one deeper", nested(jsonrpc.MaxDepth + 1), deep},
		{"brackets in a string do not count", `{"jsonrpc":"2.0","id":1,"method":"m","params":"` + strings.Repeat("[", jsonrpc.MaxDepth+1) + `"`, "Parse error: invalid JSON"},
		{"shallow syntax error", `{"jsonrpc":`, "Parse error: invalid JSON"},
		{"batch too deep", "[" + nested(jsonrpc.MaxDepth) + "]", deep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if jsonrpc.IsBatch([]byte(tt.data)) {
				_, _, err = jsonrpc.DecodeBatch([]byte(tt.data))
			} else {
				_, err = jsonrpc.Decode([]byte(tt.data))
			}
			got := ""
			if err != nil {
				var de *jsonrpc.DecodeError
				if !errors.As(err, &de) || de.Code != jsonrpc.CodeParseError {
					t.Fatalf("error %v is not a parse error", err)
				}
				got = de.Reason
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// The method of a common request is read without an allocation, and any
// method reads as its text.
func TestDecodeMethodNames(t *testing.T) {
	for _, method := range []string{"tools/call", "notifications/initialized", "server/discover", "x/custom", "tools/cal", "tools/calls"} {
		m, err := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"` + method + `"}`))
		if err != nil || m.Method != method {
			t.Errorf("Decode(%q) = %v, %v", method, m, err)
		}
	}
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`)
	withMethod := testing.AllocsPerRun(50, func() { _, _ = jsonrpc.Decode(body) })
	other := []byte(`{"jsonrpc":"2.0","id":1,"method":"x/customs","params":{}}`)
	if n := testing.AllocsPerRun(50, func() { _, _ = jsonrpc.Decode(other) }); withMethod != n-1 {
		t.Errorf("tools/call decodes with %v allocations, an unknown method with %v: want one fewer", withMethod, n)
	}
}
