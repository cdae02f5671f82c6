package config

import (
	"reflect"
	"strings"
)

// SecretValues lists the values of s that may carry a secret: every
// field tagged secret (the url, headers, env, credentials, client
// secrets, private keys, tls.key, ...), found through the tags so a new
// secret field is covered without a list to keep up. Empty values are
// left out. For scrubbing text that might repeat them (mcpgate doctor's
// messages); showing a configured value is upstream.Mask's.
func (s *Server) SecretValues() []string {
	if s == nil {
		return nil
	}
	var out []string
	secretValues(typeOf(reflect.TypeFor[Server]()), reflect.ValueOf(s).Elem(), &out)
	return out
}

func secretValues(ti *typeInfo, v reflect.Value, out *[]string) {
	add := func(s string) {
		if strings.TrimSpace(s) != "" {
			*out = append(*out, s)
		}
	}
	for _, f := range ti.fields {
		fv := v.Field(f.index)
		switch f.kind {
		case kString:
			if f.secret {
				add(fv.String())
			}
		case kStrings:
			if f.secret {
				for i := range fv.Len() {
					add(fv.Index(i).String())
				}
			}
		case kStringMap:
			if f.secret {
				for _, k := range fv.MapKeys() {
					add(fv.MapIndex(k).String())
				}
			}
		case kListMap:
			if f.secret {
				for _, k := range fv.MapKeys() {
					l := fv.MapIndex(k)
					for i := range l.Len() {
						add(l.Index(i).String())
					}
				}
			}
		case kStruct:
			secretValues(f.elem, fv, out)
		case kStructPtr:
			if !fv.IsNil() {
				secretValues(f.elem, fv.Elem(), out)
			}
		case kStructMap:
			for _, k := range fv.MapKeys() {
				e := fv.MapIndex(k)
				if e.Kind() == reflect.Pointer {
					if e.IsNil() {
						continue
					}
					e = e.Elem()
				}
				secretValues(f.elem, e, out)
			}
		case kStructList:
			for i := range fv.Len() {
				secretValues(f.elem, fv.Index(i), out)
			}
		}
	}
}
