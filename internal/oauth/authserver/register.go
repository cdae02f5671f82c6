package authserver

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/netaddr"
	"github.com/mcpgate/mcpgate/internal/oauth"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Token endpoint client authentication methods (RFC 7591 section 2).
const (
	authNone        = "none"
	authSecretBasic = "client_secret_basic"
	authSecretPost  = "client_secret_post"
)

// Bounds on what a client may register.
const (
	maxRedirectURIs   = 20
	maxURILen         = 2000
	maxClientNameLen  = 200
	maxScopeLen       = 1000
	maxStateLen       = 2000
	maxClientIDLen    = 2000
	maxDisplayNameLen = 80
)

// client is a registered client or one described by a client ID metadata
// document, as the endpoints need it.
type client struct {
	ID           string
	Name         string
	RedirectURIs []string
	AuthMethod   string
	SecretHash   string // sha256 hex of the client secret; "" for a public client
	Document     bool   // from a client ID metadata document (the name is the client's own)
}

// clientRecord is a dynamically registered client as stored (kind
// oauth_client, named by its client_id).
type clientRecord struct {
	Metadata   oauth.ClientMetadata `json:"metadata"`
	SecretHash string               `json:"secret_hash,omitempty"`
}

func (c *clientRecord) client() *client {
	return &client{ID: c.Metadata.ClientID, Name: c.Metadata.ClientName, RedirectURIs: c.Metadata.RedirectURIs,
		AuthMethod: c.Metadata.TokenEndpointAuthMethod, SecretHash: c.SecretHash}
}

// registrationError is an RFC 7591 section 3.2.2 error.
func registrationError(code, desc string) *oauthError {
	return &oauthError{Status: http.StatusBadRequest, Code: code, Description: desc}
}

// decodeRegistration parses and checks a registration request body
// (RFC 7591 section 3.1) and returns the metadata to register, with the
// defaults filled in and what this server does not use dropped. It does
// no I/O, so it is what FuzzRegister exercises.
func decodeRegistration(body []byte) (oauth.ClientMetadata, *oauthError) {
	var md oauth.ClientMetadata
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&md); err != nil {
		return md, registrationError("invalid_client_metadata", "the body is not a JSON client metadata object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return md, registrationError("invalid_client_metadata", "the body holds more than one JSON value")
	}
	// The server assigns these; a client cannot choose them.
	md.ClientID, md.ClientSecret, md.ClientIDIssuedAt, md.ClientSecretExpiresAt = "", "", 0, 0
	// Keys are only useful for private_key_jwt, which is not supported.
	md.JWKS, md.JWKSURI = nil, ""

	if len(md.RedirectURIs) == 0 {
		return md, registrationError("invalid_redirect_uri", "redirect_uris is required")
	}
	if len(md.RedirectURIs) > maxRedirectURIs {
		return md, registrationError("invalid_redirect_uri", "too many redirect_uris")
	}
	for _, u := range md.RedirectURIs {
		if err := checkRedirectURI(u); err != nil {
			return md, registrationError("invalid_redirect_uri", err.Error())
		}
	}
	switch md.TokenEndpointAuthMethod {
	case "":
		md.TokenEndpointAuthMethod = authNone
	case authNone, authSecretBasic, authSecretPost:
	default:
		return md, registrationError("invalid_client_metadata", "token_endpoint_auth_method must be none, client_secret_basic or client_secret_post")
	}
	if len(md.GrantTypes) == 0 {
		md.GrantTypes = []string{"authorization_code", "refresh_token"}
	}
	code := false
	for _, g := range md.GrantTypes {
		switch g {
		case "authorization_code":
			code = true
		case "refresh_token":
		default:
			return md, registrationError("invalid_client_metadata", "grant_types may only hold authorization_code and refresh_token")
		}
	}
	if !code {
		return md, registrationError("invalid_client_metadata", "grant_types must include authorization_code")
	}
	if len(md.ResponseTypes) == 0 {
		md.ResponseTypes = []string{"code"}
	}
	if len(md.ResponseTypes) != 1 || md.ResponseTypes[0] != "code" {
		return md, registrationError("invalid_client_metadata", "response_types must be [code]")
	}
	if !utf8.ValidString(md.ClientName) || utf8.RuneCountInString(md.ClientName) > maxClientNameLen || hasControl(md.ClientName) {
		return md, registrationError("invalid_client_metadata", "client_name must be at most 200 printable characters")
	}
	for _, f := range []struct{ name, v string }{{"client_uri", md.ClientURI}, {"logo_uri", md.LogoURI}} {
		if f.v != "" && !webURL(f.v) {
			return md, registrationError("invalid_client_metadata", f.name+" must be an http or https URL")
		}
	}
	if md.Scope != "" && !validScope(md.Scope) {
		return md, registrationError("invalid_client_metadata", "scope is not a space-separated list of scope tokens")
	}
	switch md.ApplicationType {
	case "", "native", "web":
	default:
		return md, registrationError("invalid_client_metadata", "application_type must be native or web")
	}
	if len(md.SoftwareID) > 256 || len(md.SoftwareVersion) > 256 || hasControl(md.SoftwareID) || hasControl(md.SoftwareVersion) {
		return md, registrationError("invalid_client_metadata", "software_id and software_version must be short printable strings")
	}
	return md, nil
}

// checkRedirectURI accepts an https URL, or an http one on a loopback
// host (RFC 8252 section 7.3 native clients), with no fragment (RFC 6749
// section 3.1.2) and no user info. The error is safe to show.
func checkRedirectURI(s string) error {
	if len(s) > maxURILen {
		return errors.New("a redirect URI is too long")
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return errors.New("a redirect URI is not an absolute URL")
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return errors.New("a redirect URI must not have a fragment")
	}
	if u.User != nil {
		return errors.New("a redirect URI must not have user info")
	}
	if !validHost(u.Hostname()) {
		return errors.New("a redirect URI's host is not a DNS name or IP address")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if loopbackHost(u.Hostname()) {
			return nil
		}
		return errors.New("an http redirect URI must be on a loopback host (127.0.0.1, [::1] or localhost); others must be https")
	}
	return errors.New("a redirect URI must be https, or http on a loopback host")
}

// validHost accepts a DNS name (letters, digits, dots, hyphens) or an IP
// address without a zone. url.Parse lets through sub-delimiters such as
// ";" and "," in hosts, which would be trouble in a Content-Security-Policy
// or a log line.
func validHost(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Zone() == ""
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// loopbackHost is the RFC 8252 rule for a native client's http redirect
// URI (netaddr.IsLoopbackRedirectHost).
func loopbackHost(h string) bool { return netaddr.IsLoopbackRedirectHost(h) }

func webURL(s string) bool {
	if len(s) > maxURILen {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil
}

// validScope checks RFC 6749 section 3.3: scope tokens of %x21 / %x23-5B
// / %x5D-7E separated by single spaces.
func validScope(s string) bool {
	if s == "" || len(s) > maxScopeLen {
		return false
	}
	for _, tok := range strings.Split(s, " ") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if c < 0x21 || c == 0x22 || c == 0x5c || c > 0x7e {
				return false
			}
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return true
		}
	}
	return false
}

// randomToken returns n random bytes, base64url without padding.
func randomToken(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// serveRegister is RFC 7591 dynamic client registration. It is open to
// anyone (that is its point), so it is rate-limited per client address,
// and everything a client says about itself is shown to the person as
// unverified on the consent page.
func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) error {
	if !s.regRL.allow(callers.ClientIP(r), s.now()) {
		return &oauthError{Status: http.StatusTooManyRequests, Code: "temporarily_unavailable", Description: "too many registrations from this address; try again in a minute"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodySize))
	if err != nil {
		return registrationError("invalid_client_metadata", "the body is larger than 64 KiB or unreadable")
	}
	md, oe := decodeRegistration(body)
	if oe != nil {
		return oe
	}
	md.ClientID = randomToken(16)
	md.ClientIDIssuedAt = s.now().Unix()
	rec := clientRecord{Metadata: md}
	secret := ""
	if md.TokenEndpointAuthMethod != authNone {
		secret = randomToken(32)
		rec.SecretHash = sha256Hex(secret)
	}
	doc, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := s.store.PutObject(r.Context(), store.KindOAuthClient, md.ClientID, doc); err != nil {
		return err
	}
	s.logger.Info("oauth client registered", attrClient, md.ClientID, "client_name", md.ClientName)
	resp := registrationResponse{ClientMetadata: md}
	if secret != "" {
		resp.ClientSecret = secret // shown once, never stored
		var never int64
		resp.ClientSecretExpiresAt = &never
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, resp)
	return nil
}

// registrationResponse is RFC 7591 section 3.2.1's answer. With a
// secret, client_secret_expires_at is required even when it is 0
// (never), which ClientMetadata's omitempty would drop; the outer field
// shadows it.
type registrationResponse struct {
	oauth.ClientMetadata
	ClientSecretExpiresAt *int64 `json:"client_secret_expires_at,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"server_error"}`)
	}
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	if h.Get("Cache-Control") == "" {
		h.Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// lookupClient finds a client by id: a client ID metadata document when
// the id is an http(s) URL, else a registered client. The oauthError is
// invalid_client, safe to show.
func (s *Server) lookupClient(r *http.Request, id string) (*client, error) {
	if id == "" {
		return nil, errBadClient("client_id is missing")
	}
	if len(id) > maxClientIDLen {
		return nil, errBadClient("client_id is too long")
	}
	if isURLClientID(id) {
		return s.meta.get(r.Context(), id)
	}
	o, err := s.store.GetObject(r.Context(), store.KindOAuthClient, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadClient("unknown client_id")
	}
	if err != nil {
		return nil, err
	}
	var rec clientRecord
	if err := json.Unmarshal(o.Doc, &rec); err != nil {
		return nil, err
	}
	return rec.client(), nil
}

// isURLClientID reports whether a client_id names a client ID metadata
// document rather than a registration.
func isURLClientID(id string) bool {
	return strings.HasPrefix(id, "https://") || strings.HasPrefix(id, "http://")
}

// originOf returns scheme://host of a URL, "" when it has none (for the
// Content-Security-Policy form-action list).
func originOf(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// hostOf returns the host a redirect URI delivers codes to, as shown on
// the consent page.
func hostOf(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}

func isLoopbackRedirect(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	return netaddr.IsLoopbackHost(u.Hostname())
}
