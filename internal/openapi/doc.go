// Package openapi turns an OpenAPI 3.0 or 3.1 document into MCP tools and
// tool calls into HTTP requests (SPEC C12).
//
//	spec (file or URL) --Load--> *Doc --Tools--> []*Tool (name, input/output schema)
//	tools/call arguments --Tool.Request--> *Request (method, URL, headers, body)
//	HTTP response --Result--> CallToolResult JSON
//
// It owns the document's parsing ($refs resolved by kin-openapi, external
// $refs refused), the conversion of its schemas to JSON Schema (bounded in
// depth and size, so a cyclic schema neither hangs nor explodes), tool
// naming, request building and the mapping of responses to results.
//
// It must not send the API's requests, apply credentials or follow
// redirects: internal/upstream does that with its egress code (C3, C4),
// so an OpenAPI server is one more upstream to the rest of the gateway. It
// fetches only the document itself, from a public address unless the URL
// names a loopback host, and it owns the rule for where a document may
// send requests (Doc.Base: a fetched document, only to its own origin,
// dialled as it was, Dial). It never imports upstream or gateway.
package openapi
