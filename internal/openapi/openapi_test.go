package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mcpgate/mcpgate/internal/oauth"
)

func load(t testing.TB, name string) *Doc {
	t.Helper()
	d, err := Load(context.Background(), "testdata/"+name, LoadOptions{})
	if err != nil {
		t.Fatalf("Load %s: %v", name, err)
	}
	return d
}

var nameRule = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func toolNames(d *Doc) []string {
	var n []string
	for _, t := range d.Tools() {
		n = append(n, t.Name)
	}
	return n
}

func TestRealDocuments(t *testing.T) {
	tests := []struct {
		file     string
		minTools int
		want     []string // some tools that must be there
		base     string
	}{
		{"petstore3.yaml", 19, []string{"addPet", "findPetsByStatus", "getPetById", "uploadFile", "getInventory", "loginUser"}, "https://petstore3.swagger.io/api/v3"},
		{"petstore31.yaml", 3, []string{"addPet", "getPetById", "updatePet"}, ""},
		{"openai-2024-04-09.yaml", 50, []string{"createChatCompletion", "listModels", "createEmbedding"}, "https://api.openai.com/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			start := time.Now()
			d := load(t, tt.file)
			if len(d.Tools()) < tt.minTools {
				t.Errorf("%d tools, want at least %d: %v", len(d.Tools()), tt.minTools, toolNames(d))
			}
			for _, w := range tt.want {
				if d.Tool(w) == nil {
					t.Errorf("no tool %q in %v", w, toolNames(d))
				}
			}
			seen := map[string]bool{}
			for _, tool := range d.Tools() {
				if !nameRule.MatchString(tool.Name) || seen[tool.Name] {
					t.Errorf("tool name %q breaks the MCP rule or is repeated", tool.Name)
				}
				seen[tool.Name] = true
				var in map[string]any
				if err := json.Unmarshal(tool.InputSchema, &in); err != nil || in["type"] != "object" {
					t.Errorf("%s: input schema %s", tool.Name, tool.InputSchema)
				}
				if tool.OutputSchema != nil {
					var out map[string]any
					if err := json.Unmarshal(tool.OutputSchema, &out); err != nil || out["type"] != "object" {
						t.Errorf("%s: output schema not an object: %.200s", tool.Name, tool.OutputSchema)
					}
				}
				if tool.Description == "" {
					t.Errorf("%s: no description", tool.Name)
				}
			}
			if got := d.BaseURL(); got != tt.base {
				t.Errorf("BaseURL = %q, want %q", got, tt.base)
			}
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

func TestPetstoreSchemas(t *testing.T) {
	d := load(t, "petstore3.yaml")
	get := d.Tool("getPetById")
	var in struct {
		Properties map[string]map[string]any
		Required   []string
	}
	if err := json.Unmarshal(get.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if in.Properties["petId"]["type"] != "integer" || len(in.Required) != 1 || in.Required[0] != "petId" {
		t.Errorf("getPetById input schema = %s", get.InputSchema)
	}
	if get.Wrapped || !strings.Contains(string(get.OutputSchema), `"category"`) {
		t.Errorf("getPetById output schema = %s", get.OutputSchema)
	}
	find := d.Tool("findPetsByStatus")
	if !find.Wrapped || !strings.Contains(string(find.OutputSchema), `"result":{"items"`) {
		t.Errorf("findPetsByStatus output schema (an array, wrapped) = %s", find.OutputSchema)
	}
	add := d.Tool("addPet")
	if !strings.Contains(string(add.InputSchema), `"body":{`) || !strings.Contains(string(add.InputSchema), `"required":["body"]`) {
		t.Errorf("addPet input schema = %s", add.InputSchema)
	}
	if add.body.mediaType != "application/json" {
		t.Errorf("addPet body media type %q, want JSON first", add.body.mediaType)
	}
	slot, ok := d.APIKeySlot()
	if !ok || slot != (APIKeySlot{Header: "Api_key"}) {
		t.Errorf("APIKeySlot = %+v, %v; want the api_key header", slot, ok)
	}
}

func TestTricky(t *testing.T) {
	d := load(t, "tricky.yaml")
	want := []string{"create_pet", "list.pets", "get_pets_petId_photo", "get_trees_id", "put_trees_id"}
	if diff := cmp.Diff(sortedCopy(toolNames(d)), sortedCopy(want)); diff != "" {
		t.Errorf("tools (-got +want):\n%s", diff)
	}
	tree := d.Tool("get_trees_id")
	var in struct {
		Properties map[string]map[string]any
		Required   []string
	}
	json.Unmarshal(tree.InputSchema, &in)
	for _, p := range []string{"id", "query_id", "X-Trace", "query_body"} {
		if in.Properties[p] == nil {
			t.Errorf("get_trees_id: no property %q in %s", p, tree.InputSchema)
		}
	}
	if in.Properties["session"] != nil || in.Properties["body"] != nil {
		t.Errorf("get_trees_id: cookie parameter or a body where none is: %s", tree.InputSchema)
	}
	// The cycle is cut, not expanded forever.
	if !strings.Contains(string(tree.OutputSchema), "recursive") || len(tree.OutputSchema) > 4096 {
		t.Errorf("Node output schema = %.500s (%d bytes)", tree.OutputSchema, len(tree.OutputSchema))
	}
	pets := d.Tool("list.pets")
	os := string(pets.OutputSchema)
	for _, w := range []string{`"oneOf"`, `"allOf"`, `"type":["string","null"]`, `"exclusiveMinimum":0`} {
		if !strings.Contains(os, w) {
			t.Errorf("list.pets output schema lacks %s: %s", w, os)
		}
	}
	if base := d.BaseURL(); base != "https://eu.tricky.example/v1" {
		t.Errorf("BaseURL = %q", base)
	}
	slot, ok := d.APIKeySlot()
	if !ok || slot != (APIKeySlot{Header: "Authorization", Scheme: "ApiKey"}) {
		t.Errorf("APIKeySlot = %+v, %v", slot, ok)
	}
}

func sortedCopy(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestRequest(t *testing.T) {
	d := load(t, "tricky.yaml")
	base, _ := url.Parse("https://api.example/v1/?key=k")
	tests := []struct {
		tool, args string
		method     string
		url        string
		header     map[string]string
		body       string
		err        string
	}{
		{tool: "get_trees_id", args: `{"id":"a b/../c","query_id":"q&x","X-Trace":"t1","query_body":"b"}`, method: "GET",
			url: "https://api.example/v1/trees/a%20b%2F..%2Fc?key=k&id=q%26x&body=b", header: map[string]string{"X-Trace": "t1"}},
		{tool: "list.pets", args: `{"tags":["a","b c"],"ids":[1,2],"sp":["x","y"],"pp":["x","y"],"filter":{"k":"v"}}`, method: "GET",
			url: "https://api.example/v1/pets?key=k&tags=a&tags=b+c&ids=1,2&sp=x%20y&pp=x%7Cy&filter%5Bk%5D=v"},
		{tool: "create_pet", args: `{"body":{"name":"Rex","tags":["a","b"]}}`, method: "POST",
			url: "https://api.example/v1/pets?key=k", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, body: "name=Rex&tags=a&tags=b"},
		{tool: "put_trees_id", args: `{"id":"7","body":{"b":{"a":{}}}}`, method: "PUT",
			url: "https://api.example/v1/trees/7?key=k", header: map[string]string{"Content-Type": "application/json"}, body: `{"b":{"a":{}}}`},
		{tool: "put_trees_id", args: `{"id":"7"}`, err: `missing required argument "body"`},
		{tool: "get_trees_id", args: `{}`, err: `missing required argument "id"`},
		{tool: "get_trees_id", args: `{"id":".."}`, err: `not a valid path segment`},
		{tool: "get_trees_id", args: `{"id":"x","X-Trace":"a\r\nB: c"}`, err: `must not contain CR`},
		{tool: "get_trees_id", args: `[1]`, err: `must be a JSON object`},
	}
	for _, tt := range tests {
		t.Run(tt.tool+tt.args, func(t *testing.T) {
			r, err := d.Tool(tt.tool).Request(base, json.RawMessage(tt.args))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Method != tt.method || r.URL.String() != tt.url {
				t.Errorf("got %s %s\nwant %s %s", r.Method, r.URL, tt.method, tt.url)
			}
			for k, v := range tt.header {
				if r.Header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, r.Header.Get(k), v)
				}
			}
			if string(r.Body) != tt.body {
				t.Errorf("body = %q, want %q", r.Body, tt.body)
			}
		})
	}
}

func TestResult(t *testing.T) {
	d := load(t, "petstore3.yaml")
	get, find := d.Tool("getPetById"), d.Tool("findPetsByStatus")
	long := strings.Repeat("x", 5000)
	tests := []struct {
		name string
		tool *Tool
		r    Response
		want string
	}{
		{"object", get, Response{Status: 200, ContentType: "application/json", Body: []byte(`{"id":1}`)},
			`{"content":[{"type":"text","text":"{\"id\":1}"}],"structuredContent":{"id":1}}`},
		{"array wrapped", find, Response{Status: 200, ContentType: "application/json; charset=utf-8", Body: []byte(`[{"id":1}]`)},
			`{"content":[{"type":"text","text":"[{\"id\":1}]"}],"structuredContent":{"result":[{"id":1}]}}`},
		{"not the promised object", get, Response{Status: 200, ContentType: "application/json", Body: []byte(`[1]`)},
			`{"content":[{"type":"text","text":"[1]"}]}`},
		{"text", get, Response{Status: 200, ContentType: "text/plain", Body: []byte("hi")},
			`{"content":[{"type":"text","text":"hi"}]}`},
		{"binary", get, Response{Status: 200, ContentType: "image/png", Body: []byte{0x89, 'P', 'N', 'G', 0xff}, URI: "https://h/p"},
			`{"content":[{"type":"resource","resource":{"uri":"https://h/p","mimeType":"image/png","blob":"iVBOR/8="}}]}`},
		{"404", get, Response{Status: 404, ContentType: "application/json", Body: []byte(`{"message":"Pet not found"}`)},
			`{"content":[{"type":"text","text":"HTTP 404 Not Found: {\"message\":\"Pet not found\"}"}],"isError":true}`},
		{"500 bounded", get, Response{Status: 500, Body: []byte(long)},
			`{"content":[{"type":"text","text":"HTTP 500 Internal Server Error: ` + long[:MaxErrorExcerpt] + `..."}],"isError":true}`},
		{"204", get, Response{Status: 204},
			`{"content":[{"type":"text","text":"HTTP 204 (no content)"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(string(tt.tool.Result(tt.r)), tt.want); diff != "" {
				t.Errorf("(-got +want):\n%s", diff)
			}
		})
	}
}

func TestSelect(t *testing.T) {
	d := load(t, "petstore3.yaml")
	all := len(d.Tools())
	s := d.Select([]string{"getPetById", "GET /store/*", "post /pet"}, []string{"GET /store/order/{orderId}"})
	if diff := cmp.Diff(sortedCopy(toolNames(s)), []string{"addPet", "getInventory", "getPetById"}); diff != "" {
		t.Errorf("(-got +want):\n%s", diff)
	}
	if s.Tool("deletePet") != nil {
		t.Error("an excluded tool is still found by name")
	}
	if len(d.Tools()) != all || d.Tool("deletePet") == nil {
		t.Error("Select changed the document it selected from")
	}
}

func TestToolName(t *testing.T) {
	for _, tt := range []struct{ id, method, path, want string }{
		{"getPetById", "GET", "/pet/{petId}", "getPetById"},
		{"", "GET", "/pet/{petId}/uploadImage", "get_pet_petId_uploadImage"},
		{"a b/c", "GET", "/", "a_b_c"},
		{"", "DELETE", "/", "delete"},
		{strings.Repeat("x", 200), "GET", "/", strings.Repeat("x", 128)},
	} {
		if got := ToolName(tt.id, tt.method, tt.path); got != tt.want {
			t.Errorf("ToolName(%q, %q, %q) = %q, want %q", tt.id, tt.method, tt.path, got, tt.want)
		}
	}
}

func TestLoadURL(t *testing.T) {
	spec, err := os.ReadFile("testdata/petstore31.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/openapi.yaml":
			w.Write(spec)
		case "/big":
			w.Write([]byte(strings.Repeat("#", 2048)))
		case "/away":
			http.Redirect(w, r, "http://other.example/openapi.yaml", http.StatusFound)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	d, err := Load(context.Background(), srv.URL+"/openapi.yaml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// servers: /api/v31, relative to where the document came from.
	if got, want := d.BaseURL(), srv.URL+"/api/v31"; got != want {
		t.Errorf("BaseURL = %q, want %q", got, want)
	}
	if _, err := Load(context.Background(), srv.URL+"/big", LoadOptions{MaxBytes: 1024}); err == nil || !strings.Contains(err.Error(), "larger than 1024") {
		t.Errorf("oversized spec: err = %v", err)
	}
	if _, err := Load(context.Background(), srv.URL+"/away", LoadOptions{}); err == nil || !strings.Contains(err.Error(), "another origin") {
		t.Errorf("cross-origin redirect: err = %v", err)
	}
	if _, err := Load(context.Background(), srv.URL+"/missing", LoadOptions{}); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("404: err = %v", err)
	}
	// A name that is not loopback goes through the public-address guard:
	// 127.0.0.1 under another name is refused.
	u, _ := url.Parse(srv.URL)
	_, err = Load(context.Background(), "http://127.0.0.1.nip.invalid:"+u.Port()+"/openapi.yaml", LoadOptions{Timeout: 2 * time.Second})
	if err == nil {
		t.Error("a non-loopback name was fetched")
	}
}

func TestPetstore31IDRefs(t *testing.T) {
	d := load(t, "petstore31.yaml")
	out := string(d.Tool("getPetById").OutputSchema)
	// petDetails refers to PetDetails by its $id; petDetailsId to an
	// $anchor inside it; both are resolved, and 3.1 numeric bounds kept.
	for _, w := range []string{`"petDetails":{"properties":{"category"`, `"petDetailsId":{"allOf":[{"format":"int64","type":"integer"}]`, `"exclusiveMaximum":10`} {
		if !strings.Contains(out, w) {
			t.Errorf("getPetById output schema lacks %s:\n%s", w, out)
		}
	}
}

// TestBase (issue 22 §6): a fetched document sends requests only to its
// own origin, whatever its servers entry says; one read from a file (the
// operator's) to any absolute http(s) URL.
func TestBase(t *testing.T) {
	doc := func(servers string) []byte {
		return []byte(`{"openapi":"3.0.0","info":{"title":"t","version":"1"},"servers":` + servers + `,"paths":{}}`)
	}
	loc, _ := url.Parse("https://docs.example/specs/api.json")
	for _, tc := range []struct {
		name, servers string
		loc           *url.URL
		want, err     string
	}{
		{"relative", `[{"url":"/v1"}]`, loc, "https://docs.example/v1", ""},
		{"same origin, default port written", `[{"url":"https://DOCS.example:443/v2"}]`, loc, "https://DOCS.example:443/v2", ""},
		{"variable default on the same origin", `[{"url":"https://docs.example/{v}","variables":{"v":{"default":"v3"}}}]`, loc, "https://docs.example/v3", ""},
		{"another host", `[{"url":"https://api.other.example/v1"}]`, loc, "", "openapi: the document's servers URL is not on the document's own origin: https://api.other.example:443 is not https://docs.example:443; set base_url to send calls there"},
		{"another port", `[{"url":"https://docs.example:8443/v1"}]`, loc, "", "is not on the document's own origin"},
		{"another scheme", `[{"url":"http://docs.example/v1"}]`, loc, "", "is not on the document's own origin"},
		{"scheme-relative elsewhere", `[{"url":"//evil.example/v1"}]`, loc, "", "is not on the document's own origin"},
		{"userinfo trick", `[{"url":"https://docs.example@evil.example/v1"}]`, loc, "", "is not on the document's own origin"},
		{"variable moves the host", `[{"url":"https://{h}/v1","variables":{"h":{"default":"evil.example"}}}]`, loc, "", "is not on the document's own origin"},
		{"metadata address", `[{"url":"http://169.254.169.254/latest"}]`, loc, "", "is not on the document's own origin"},
		{"none", `[]`, loc, "", "openapi: no base_url configured and the document has no absolute http(s) servers URL"},
		{"file, absolute", `[{"url":"http://10.0.0.5:8080/api"}]`, nil, "http://10.0.0.5:8080/api", ""},
		{"file, relative", `[{"url":"/v1"}]`, nil, "", "openapi: no base_url configured"},
		{"file, not http", `[{"url":"ftp://x.example/"}]`, nil, "", "openapi: no base_url configured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse(doc(tc.servers), tc.loc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := d.Base()
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("Base() = %v, %v; want error %q", got, err, tc.err)
				}
			case err != nil || got.String() != tc.want:
				t.Errorf("Base() = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// TestDial: requests of a document's choosing are dialled as its fetch
// was: public addresses only (a public name resolving to loopback is
// refused at connect time), unless the URL names a loopback host.
func TestDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	restore := oauth.SetTestResolver(func(string) string { return "127.0.0.1:" + port })
	defer restore()
	public, _ := url.Parse("https://api.example/")
	if c, err := Dial(public, time.Second)(context.Background(), "tcp", "api.example:"+port); err == nil || !errors.Is(err, ErrBlockedAddress) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial of a public name that resolves to loopback: %v, want ErrBlockedAddress", err)
	}
	local, _ := url.Parse(srv.URL)
	c, err := Dial(local, time.Second)(context.Background(), "tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatalf("dial of a loopback URL: %v", err)
	}
	c.Close()
}
