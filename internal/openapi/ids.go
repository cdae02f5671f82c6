package openapi

import (
	"bytes"
	"strings"

	"go.yaml.in/yaml/v3"
)

// resolveIDRefs rewrites the $refs of a 3.1 document that name a
// component schema by its $id (JSON Schema 2020-12: "$ref:
// /schemas/petdetails", or with an $anchor fragment) into the JSON
// pointers kin-openapi resolves. $ids are matched as written (not
// resolved against a base URI). The document is returned unchanged when
// it has no $id or does not decode.
func resolveIDRefs(data []byte) []byte {
	if !bytes.Contains(data, []byte("$id")) {
		return data
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil || len(root.Content) == 0 {
		return data
	}
	doc := root.Content[0]
	schemas := child(child(doc, "components"), "schemas")
	if schemas == nil {
		return data
	}
	ids := map[string]string{}     // $id -> pointer
	anchors := map[string]string{} // $id + "#" + anchor -> pointer
	for i := 0; i+1 < len(schemas.Content); i += 2 {
		name, s := schemas.Content[i].Value, schemas.Content[i+1]
		ptr := "#/components/schemas/" + escapePointer(name)
		id := child(s, "$id")
		if id == nil || id.Value == "" {
			continue
		}
		ids[id.Value] = ptr
		walk(s, ptr, 0, func(n *yaml.Node, p string) {
			if a := child(n, "$anchor"); a != nil && a.Value != "" {
				anchors[id.Value+"#"+a.Value] = p
			}
		})
	}
	if len(ids) == 0 {
		return data
	}
	changed := false
	walk(doc, "#", 0, func(n *yaml.Node, _ string) {
		ref := child(n, "$ref")
		if ref == nil || strings.HasPrefix(ref.Value, "#") {
			return
		}
		base, frag, _ := strings.Cut(ref.Value, "#")
		ptr, ok := ids[base]
		if !ok {
			return
		}
		switch {
		case frag == "":
		case strings.HasPrefix(frag, "/"):
			ptr += frag
		default:
			if ptr, ok = anchors[base+"#"+frag]; !ok {
				return
			}
		}
		ref.Value, changed = ptr, true
	})
	if !changed {
		return data
	}
	out, err := yaml.Marshal(&root)
	if err != nil {
		return data
	}
	return out
}

// child is the value of key in mapping n, or nil.
func child(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// walk calls f on every mapping under n with its JSON pointer, to a
// bounded depth.
func walk(n *yaml.Node, ptr string, depth int, f func(*yaml.Node, string)) {
	if n == nil || depth > 64 {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		f(n, ptr)
		for i := 0; i+1 < len(n.Content); i += 2 {
			walk(n.Content[i+1], ptr+"/"+escapePointer(n.Content[i].Value), depth+1, f)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			walk(c, ptr+"/"+itoa(i), depth+1, f)
		}
	}
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
