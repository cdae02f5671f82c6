package openapi

import (
	"encoding/json"
	"net/url"
	"os"
	"testing"
)

// FuzzParse: any document either fails to parse or gives tools whose
// schemas are JSON and whose requests build without panicking, for any
// arguments.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"testdata/tricky.yaml", "testdata/petstore31.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, []byte(`{"id":"1","body":{"a":[1,"x",{"k":true}]}}`))
	}
	f.Add([]byte(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a/{x}":{"get":{"parameters":[{"name":"x","in":"path","required":true,"schema":{"$ref":"#/components/schemas/S"}}]}}},"components":{"schemas":{"S":{"items":{"$ref":"#/components/schemas/S"}}}}}`), []byte(`{"x":[[]]}`))
	f.Add([]byte(`{"openapi":"3.0.0","info":{"title":"t","version":"1"},"servers":[{"url":"//other.example:443/{v}","variables":{"v":{"default":"x@evil.example"}}}],"paths":{}}`), []byte(`{}`))
	base, _ := url.Parse("https://api.example/v1")
	docLoc, _ := url.Parse("https://docs.example/specs/api.json")
	f.Fuzz(func(t *testing.T, spec, args []byte) {
		if len(spec) > 64<<10 {
			return
		}
		// Fetched from a URL, a document sends requests to its own
		// origin or nowhere (Doc.Base).
		if d, err := Parse(spec, docLoc); err == nil {
			if b, err := d.Base(); err == nil && Origin(b) != Origin(docLoc) {
				t.Fatalf("base %s is not on the document's origin", b)
			}
		}
		d, err := Parse(spec, nil)
		if err != nil {
			return
		}
		for _, tool := range d.Tools() {
			if !json.Valid(tool.InputSchema) || (tool.OutputSchema != nil && !json.Valid(tool.OutputSchema)) {
				t.Fatalf("%s: invalid schema JSON", tool.Name)
			}
			if !nameRule.MatchString(tool.Name) {
				t.Fatalf("tool name %q breaks the MCP rule", tool.Name)
			}
			r, err := tool.Request(base, args)
			if err == nil && r.URL.Host != base.Host {
				t.Fatalf("%s: request left the base URL's host: %s", tool.Name, r.URL)
			}
			_ = tool.Result(Response{Status: 200, ContentType: "application/json", Body: args})
		}
	})
}
