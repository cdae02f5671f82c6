package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// Request is the HTTP request of one tool call, before credentials.
type Request struct {
	Method string
	URL    *url.URL
	Header http.Header // parameters in headers, Accept, Content-Type
	Body   []byte      // nil: none
}

// ArgumentError is a call whose arguments do not fit the operation: a
// tool error for the model to correct, never sent upstream.
type ArgumentError struct{ Msg string }

func (e *ArgumentError) Error() string { return e.Msg }

func argErr(format string, a ...any) error { return &ArgumentError{Msg: fmt.Sprintf(format, a...)} }

// Request builds the HTTP request of a call of t with args (the
// tools/call arguments, a JSON object; nil or null: none) against base,
// the API's base URL: path parameters escaped, query parameters
// serialised per style and explode (form, spaceDelimited, pipeDelimited,
// deepObject), header parameters, and the body as JSON, as a form or (any
// other media type) the body argument's string as it is.
func (t *Tool) Request(base *url.URL, args json.RawMessage) (*Request, error) {
	var in map[string]any
	if len(args) > 0 && string(args) != "null" {
		d := json.NewDecoder(strings.NewReader(string(args)))
		d.UseNumber()
		if err := d.Decode(&in); err != nil {
			return nil, argErr("arguments must be a JSON object")
		}
	}
	r := &Request{Method: t.Method, Header: make(http.Header)}
	p := t.Path
	var query []string
	for _, pr := range t.params {
		v, ok := in[pr.arg]
		if !ok || v == nil {
			if pr.required {
				return nil, argErr("missing required argument %q", pr.arg)
			}
			continue
		}
		switch pr.in {
		case openapi3.ParameterInPath:
			s, err := simpleValue(v, pr.explode)
			if err != nil {
				return nil, argErr("argument %q: %v", pr.arg, err)
			}
			if s == "." || s == ".." || s == "" {
				// An empty or dot segment would address another path.
				return nil, argErr("argument %q: %q is not a valid path segment", pr.arg, s)
			}
			p = strings.ReplaceAll(p, "{"+pr.name+"}", url.PathEscape(s))
		case openapi3.ParameterInQuery:
			q, err := queryPairs(pr, v)
			if err != nil {
				return nil, argErr("argument %q: %v", pr.arg, err)
			}
			query = append(query, q...)
		case openapi3.ParameterInHeader:
			s, err := simpleValue(v, pr.explode)
			if err != nil {
				return nil, argErr("argument %q: %v", pr.arg, err)
			}
			if strings.ContainsAny(s, "\r\n\x00") {
				return nil, argErr("argument %q: a header value must not contain CR, LF or NUL", pr.arg)
			}
			r.Header.Set(pr.name, s)
		}
	}
	if t.body != nil {
		v, ok := in[BodyArg]
		switch {
		case ok && v != nil:
			b, err := encodeBody(t.body.mediaType, v)
			if err != nil {
				return nil, argErr("argument %q: %v", BodyArg, err)
			}
			r.Body = b
			r.Header.Set("Content-Type", t.body.mediaType)
		case t.body.required:
			return nil, argErr("missing required argument %q", BodyArg)
		}
	}
	r.Header.Set("Accept", "application/json, */*;q=0.8")

	u := *base
	u.Path = strings.TrimRight(base.Path, "/") + p
	u.RawPath = strings.TrimRight(base.EscapedPath(), "/") + p
	if len(query) > 0 {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += strings.Join(query, "&")
	}
	u.Fragment, u.RawFragment = "", ""
	// The escaped path is authoritative: re-derive Path from it.
	if dec, err := url.PathUnescape(u.RawPath); err == nil {
		u.Path = dec
	}
	r.URL = &u
	return r, nil
}

// scalar is v as a parameter string.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case nil:
		return "", nil
	}
	return "", errors.New("must be a string, number or boolean")
}

// simpleValue serialises v in the simple style (path and header
// parameters): arrays comma-joined, objects k,v,... (k=v,... exploded).
func simpleValue(v any, explode bool) (string, error) {
	switch x := v.(type) {
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalar(e)
			if err != nil {
				return "", err
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		var parts []string
		for _, k := range sortedKeys(x) {
			s, err := scalar(x[k])
			if err != nil {
				return "", err
			}
			if explode {
				parts = append(parts, k+"="+s)
			} else {
				parts = append(parts, k, s)
			}
		}
		return strings.Join(parts, ","), nil
	}
	return scalar(v)
}

// queryPairs serialises a query parameter as escaped name=value pairs.
func queryPairs(pr param, v any) ([]string, error) {
	name := url.QueryEscape(pr.name)
	switch x := v.(type) {
	case []any:
		vals := make([]string, 0, len(x))
		for _, e := range x {
			s, err := scalar(e)
			if err != nil {
				return nil, err
			}
			vals = append(vals, url.QueryEscape(s))
		}
		if len(vals) == 0 {
			return nil, nil
		}
		switch {
		case pr.style == openapi3.SerializationSpaceDelimited:
			return []string{name + "=" + strings.Join(vals, "%20")}, nil
		case pr.style == openapi3.SerializationPipeDelimited:
			return []string{name + "=" + strings.Join(vals, "%7C")}, nil
		case pr.explode:
			out := make([]string, len(vals))
			for i, s := range vals {
				out[i] = name + "=" + s
			}
			return out, nil
		}
		return []string{name + "=" + strings.Join(vals, ",")}, nil
	case map[string]any:
		var out []string
		keys := sortedKeys(x)
		var flat []string
		for _, k := range keys {
			s, err := scalar(x[k])
			if err != nil {
				return nil, err
			}
			switch {
			case pr.style == openapi3.SerializationDeepObject:
				out = append(out, name+"%5B"+url.QueryEscape(k)+"%5D="+url.QueryEscape(s))
			case pr.explode:
				out = append(out, url.QueryEscape(k)+"="+url.QueryEscape(s))
			default:
				flat = append(flat, url.QueryEscape(k), url.QueryEscape(s))
			}
		}
		if len(flat) > 0 {
			out = append(out, name+"="+strings.Join(flat, ","))
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	return []string{name + "=" + url.QueryEscape(s)}, nil
}

// encodeBody encodes the body argument for media type mt.
func encodeBody(mt string, v any) ([]byte, error) {
	switch {
	case isJSON(mt):
		return json.Marshal(v)
	case mt == formMedia:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("must be an object (sent as a form)")
		}
		form := url.Values{}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range obj {
				if !yield(k) {
					return
				}
			}
		}) {
			switch x := obj[k].(type) {
			case []any:
				for _, e := range x {
					s, err := scalar(e)
					if err != nil {
						return nil, fmt.Errorf("field %q: %w", k, err)
					}
					form.Add(k, s)
				}
			case map[string]any:
				b, err := json.Marshal(x)
				if err != nil {
					return nil, err
				}
				form.Add(k, string(b))
			default:
				s, err := scalar(x)
				if err != nil {
					return nil, fmt.Errorf("field %q: %w", k, err)
				}
				form.Add(k, s)
			}
		}
		return []byte(form.Encode()), nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("must be a string (sent as %s)", mt)
	}
	return []byte(s), nil
}
