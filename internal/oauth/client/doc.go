// Package client owns the client side of the MCP authorization flow for
// upstreams (the MCP authorization spec, 2025-11-25): discovery from an
// upstream's 401 (RFC 9728 protected resource metadata, RFC 8414 and
// OpenID Connect authorization server metadata, the 2025-03-26 default
// endpoints), client registration (pre-registered, client ID metadata
// document, RFC 7591 dynamic registration), the authorization code grant
// with PKCE S256 and the RFC 8707 resource parameter, the RFC 9207 iss
// check, refresh with rotation, and step-up on insufficient_scope; and the
// URL rules the other OAuth clients of mcpgate share (the canonical
// resource URI, the well-known metadata locations).
//
// It does not store tokens or registrations (it hands a plan and its
// client to the caller to keep, sealed, as Saved, and Restore checks what
// comes back as discovery would), does not
// route HTTP (the gateway mounts the callback), and never puts a token,
// code, verifier or secret in an error or a log line. Every fetch it makes
// is bounded in size and time, is https unless the upstream itself is
// http on loopback, follows redirects only within an origin, and reaches
// only addresses of the upstream's class: a public upstream cannot make
// mcpgate dial a loopback or private address, and no upstream can make it
// dial a link-local or cloud metadata address (netaddr.MetadataAddr).
package client
