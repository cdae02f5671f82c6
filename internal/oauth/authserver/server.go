package authserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Defaults and bounds of the server.
const (
	// DefaultKeyRotation is how long a signing key signs before a new one
	// takes over. The previous key stays published until the tokens it
	// signed have expired.
	DefaultKeyRotation = 30 * 24 * time.Hour
	// DefaultIdPTimeout bounds every request to the IdP, whatever the
	// operator's HTTPClient says.
	DefaultIdPTimeout = 10 * time.Second
	// DefaultScope is granted when an authorization request names none.
	DefaultScope = "mcp"

	pendingTTL  = 10 * time.Minute
	maxPending  = 10000
	codeTTL     = 60 * time.Second
	maxCodes    = 10000
	maxBodySize = 64 << 10 // registration, token, login and consent bodies
	sweepEvery  = time.Minute
	purgeEvery  = time.Hour
	clockSkew   = config.DefaultClockSkew
)

// ErrKeyRejected is what a KeyAuthenticator returns (possibly wrapped) for
// a key that is unknown, disabled or expired. Any other error means the key
// could not be checked: the person is asked to try again later rather than
// told the key is wrong.
var ErrKeyRejected = errors.New("key rejected")

// KeyAuthenticator checks a pasted virtual key and returns the key's
// alias, user and team. It is called from request goroutines concurrently.
type KeyAuthenticator interface {
	AuthenticateKey(ctx context.Context, secret string) (alias, user, team string, err error)
}

// KeyChecker is an optional capability of a KeyAuthenticator: when the
// one passed in implements it, a refresh of tokens issued to a key login
// asks whether the key (by alias) is still active, so that deleting or
// disabling the key also ends its OAuth sessions at their next refresh.
// A false answer revokes the refresh token family; an error fails the
// refresh without revoking.
type KeyChecker interface {
	KeyActive(ctx context.Context, alias string) (bool, error)
}

// Options configure a Server. The zero value of a field means its
// documented default; Login, Store and DataDir are required.
type Options struct {
	Login *config.Login
	// PublicURL is the gateway's external base URL (config public_url),
	// which is the issuer; "" derives the issuer from each request: https
	// when the request came over TLS (r.TLS, never X-Forwarded-Proto,
	// which any client can send), and the Host header, unless Issuer
	// names it.
	PublicURL string
	// Issuer, without a PublicURL, names the issuer (a base URL) for a
	// request instead of its scheme and Host: the gateway's own base URL,
	// which no request header chooses. nil: the request's.
	Issuer func(*http.Request) string
	Store  store.Objects
	// Keys checks pasted virtual keys; required when Login.Keys.
	Keys KeyAuthenticator
	// HTTPClient talks to the IdP (discovery, JWKS, token). The IdP is
	// operator-configured, so there is no address guard; every request is
	// bounded by DefaultIdPTimeout. nil: a client with that timeout.
	HTTPClient *http.Client
	// MetadataClient fetches client ID metadata documents. nil: one built
	// here that dials public addresses only (unless
	// Login.AllowPrivateMetadata), follows no redirects and gives up
	// after 5 s. A client passed in is used with redirects turned off.
	MetadataClient *http.Client
	// DataDir holds oauth-seal.key, the key the signing keys are sealed
	// under in the store; created (0700) if missing.
	DataDir string
	// SealKey, 32 bytes, replaces oauth-seal.key (auth.login.seal_key):
	// the replicas of a fleet share one store, so they must share the key
	// its signing keys are sealed under. A stored key it cannot open fails
	// the start instead of being replaced.
	SealKey []byte
	// Shared, for a fleet, holds pending logins and codes so that each
	// step of a login may land on any replica (shared.go); nil keeps them
	// in this process.
	Shared Shared
	// Routes names the gateway's MCP routes: an authorization request for
	// a resource where it finds none is refused (invalid_target), and the
	// consent page calls the resource what it says. nil (a server without
	// a gateway in front) takes any path below the issuer but the admin
	// API's and its own, and calls it "the MCP server at <url>".
	Routes RouteNamer
	// Admins tells whether a person has admin rights, for the consent
	// page of the admin API; nil: the page says what approving means if
	// the person has them.
	Admins AdminChecker
	Now    func() time.Time
	Logger *slog.Logger
}

// Server is the authorization server. It is safe for concurrent use;
// Close stops its background sweeper.
type Server struct {
	login   config.Login
	public  string                     // PublicURL without a trailing slash; "" = per request
	issuer  func(*http.Request) string // per request without public; nil: its scheme and Host
	prefix  string                     // the path of public, "" or "/p"
	store   store.Objects
	keyAuth KeyAuthenticator
	namer   RouteNamer   // nil: any MCP-shaped resource
	admins  AdminChecker // nil: unknown
	now     func() time.Time
	logger  *slog.Logger

	keys     *keyring
	idp      *idp // nil without Login.Issuer
	meta     *metadataFetcher
	ownsMeta *http.Transport // closed by Close when the metadata client is ours
	pending  *pendingStore
	codes    *codeStore
	confirms confirmStore
	loginRL  *limiter // key login attempts per client address
	regRL    *limiter // registrations per client address

	// tokenMu serialises refresh token rotation and revocation: a family
	// is read, checked and written back as one step, so two concurrent
	// refreshes with the same token cannot both succeed.
	tokenMu sync.Mutex

	handler   http.Handler
	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// Log attribute keys.
const (
	attrErr    = "err"
	attrClient = "client_id"
	attrUser   = "user"
	attrKid    = "kid"
	attrPath   = "path"
)

// New builds a server: it reads or creates the sealing key and the
// signing keys, then starts the sweeper. ctx bounds the start only.
func New(ctx context.Context, o Options) (*Server, error) {
	if o.Login == nil {
		return nil, errors.New("authserver: no login configuration")
	}
	if o.Store == nil {
		return nil, errors.New("authserver: no store")
	}
	if o.DataDir == "" {
		return nil, errors.New("authserver: no data directory for the sealing key")
	}
	if o.Login.Issuer == "" && !o.Login.Keys {
		return nil, errors.New("authserver: login needs an issuer or keys")
	}
	if o.Login.Keys && o.Keys == nil {
		return nil, errors.New("authserver: key login without a key authenticator")
	}
	s := &Server{
		login:   *o.Login,
		store:   o.Store,
		keyAuth: o.Keys,
		issuer:  o.Issuer,
		namer:   o.Routes,
		admins:  o.Admins,
		now:     o.Now,
		logger:  o.Logger,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	if s.login.AccessTokenTTL < 0 {
		s.login.AccessTokenTTL = 0
	}
	if s.login.RefreshTokenTTL < 0 {
		s.login.RefreshTokenTTL = 0
	}
	// Zero lifetimes are the config's defaults (a Login built in code).
	s.login = s.login.OrDefaults()
	if o.PublicURL != "" {
		u, err := url.Parse(strings.TrimSuffix(o.PublicURL, "/"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("authserver: public URL %q is not an http(s) base URL", o.PublicURL)
		}
		s.public, s.prefix = u.String(), u.EscapedPath()
	}

	seal, fresh := o.SealKey, false
	var err error
	if seal == nil {
		if seal, fresh, err = loadSealKey(o.DataDir); err != nil {
			return nil, fmt.Errorf("authserver: %w", err)
		}
	}
	s.keys = &keyring{store: o.Store, now: s.now, logger: s.logger, rotation: DefaultKeyRotation,
		retain: s.login.AccessTokenTTL + clockSkew}
	if s.keys.aead, err = newAEAD(seal); err != nil {
		return nil, fmt.Errorf("authserver: %w", err)
	}
	if err := s.keys.load(ctx, fresh); err != nil {
		return nil, fmt.Errorf("authserver: %w", err)
	}
	if err := s.keys.rotate(ctx); err != nil {
		return nil, fmt.Errorf("authserver: %w", err)
	}
	// Consents from before consent was per resource count for none
	// (hasConsent never finds them); this deletes them. Failing to is
	// no reason not to start: the hourly purge tries again.
	if err := s.dropOldConsents(ctx); err != nil {
		s.logger.Warn("oauth: could not delete consents that name no resource", attrErr, err)
	}

	if s.login.Issuer != "" {
		hc := o.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: DefaultIdPTimeout}
		}
		s.idp = newIDP(&s.login, hc, s.now)
	}
	mc := o.MetadataClient
	if mc == nil {
		mc, s.ownsMeta = newMetadataClient(s.login.AllowPrivateMetadata)
	}
	s.meta = newMetadataFetcher(mc, s.login.AllowPrivateMetadata, s.now)
	s.pending = newPendingStore(maxPending)
	s.codes = newCodeStore(maxCodes)
	if o.Shared != nil {
		t := &sharedTables{s: o.Shared, log: s.logger}
		s.pending.shared, s.codes.shared = t, t
	}
	s.loginRL = newLimiter(10, time.Minute)
	s.regRL = newLimiter(30, time.Minute)
	s.handler = s.routes()

	jctx, stop := context.WithCancel(context.Background())
	s.stop, s.done = stop, make(chan struct{})
	go s.janitor(jctx)
	return s, nil
}

// Close stops the sweeper and waits for it. It is safe to call more than
// once; the handler must not be used afterwards.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		if s.ownsMeta != nil {
			s.ownsMeta.CloseIdleConnections()
		}
	})
	return nil
}

// Handler serves the endpoints in the package doc and the authorization
// server metadata. Paths are matched with and without the public URL's
// path prefix, so that it works whether or not a proxy in front strips it.
func (s *Server) Handler() http.Handler { return s.handler }

// Issuer returns the issuer identifier for a request: the public URL,
// else Options.Issuer's, else the request's own scheme and host.
func (s *Server) Issuer(r *http.Request) string {
	if s.public != "" {
		return s.public
	}
	if s.issuer != nil {
		return s.issuer(r)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// MatchIssuer reports whether iss is an issuer this server signs for. With
// a public URL that is exactly one string. Without one the issuer is
// whatever scheme and Host a request named, so every issuer of that shape
// (scheme://host, nothing else) matches: the signature by [PublicKeys],
// not the iss string, is then what ties a token to this server, and the
// gateway should consult its configured OIDC issuers first.
func (s *Server) MatchIssuer(iss string) bool {
	if s.public != "" {
		return iss == s.public
	}
	u, err := url.Parse(iss)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		u.Path == "" && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" && u.User == nil &&
		u.String() == iss
}

// PublicKeys returns the public halves of the signing keys: the current
// one and those whose tokens may still be valid.
func (s *Server) PublicKeys() jose.JSONWebKeySet { return s.keys.public() }

// janitor sweeps the in-memory tables every minute, keeps the signing
// keys current (rotation, keys other replicas made), and purges expired
// refresh token records from the store every hour.
func (s *Server) janitor(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	lastPurge := s.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		s.pending.sweep(now)
		s.codes.sweep(now)
		s.meta.sweep(now)
		s.loginRL.sweep(now)
		s.regRL.sweep(now)
		if err := s.keys.reload(ctx); err != nil && ctx.Err() == nil {
			s.logger.Error("oauth signing keys", attrErr, err)
		}
		if now.Sub(lastPurge) >= purgeEvery {
			lastPurge = now
			if err := s.purge(ctx, now); err != nil && ctx.Err() == nil {
				s.logger.Error("oauth purge", attrErr, err)
			}
		}
	}
}

// handlerFunc is an endpoint that returns its failure; api and page turn
// it into the response.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// oauthError is a failure the client (or person) is shown: an RFC 6749
// error code and a description safe to display. Err, the cause, is only
// logged.
type oauthError struct {
	Status      int
	Code        string
	Description string
	Basic       bool // the client authenticated with HTTP Basic (RFC 6749 section 5.2)
	Err         error
}

func (e *oauthError) Error() string {
	if e.Err != nil {
		return e.Code + ": " + e.Description + ": " + e.Err.Error()
	}
	return e.Code + ": " + e.Description
}

func (e *oauthError) Unwrap() error { return e.Err }

func errInvalidRequest(desc string) *oauthError {
	return &oauthError{Status: http.StatusBadRequest, Code: "invalid_request", Description: desc}
}

func errInvalidGrant(desc string) *oauthError {
	return &oauthError{Status: http.StatusBadRequest, Code: "invalid_grant", Description: desc}
}

// errBadClient is invalid_client where no client authentication was
// attempted (an authorization request names an unusable client), so 400.
func errBadClient(desc string, cause ...error) *oauthError {
	return &oauthError{Status: http.StatusBadRequest, Code: "invalid_client", Description: desc, Err: errors.Join(cause...)}
}

func errInvalidClient(desc string, basic bool) *oauthError {
	return &oauthError{Status: http.StatusUnauthorized, Code: "invalid_client", Description: desc, Basic: basic}
}

// asOAuthError turns any error into what may be shown: an oauthError as
// is, anything else as a server_error whose cause is only logged.
func asOAuthError(err error) *oauthError {
	var oe *oauthError
	if errors.As(err, &oe) {
		return oe
	}
	return &oauthError{Status: http.StatusInternalServerError, Code: "server_error", Description: "internal error", Err: err}
}

// api adapts a JSON endpoint: failures become an RFC 6749 section 5.2
// error body. Every JSON endpoint may be called from a browser-based
// client on another origin; none of them uses cookies, so CORS is open.
func (s *Server) api(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cors(w.Header())
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		err := h(w, r)
		if err == nil {
			return
		}
		oe := asOAuthError(err)
		s.logFailure(r, oe)
		if oe.Basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="mcpgate"`)
		}
		body := map[string]string{"error": oe.Code}
		if oe.Description != "" {
			body["error_description"] = oe.Description
		}
		writeJSON(w, oe.Status, body)
	})
}

// page adapts a browser endpoint: failures become an error page, and
// every response carries the page security headers.
func (s *Server) page(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		oe := asOAuthError(err)
		s.logFailure(r, oe)
		s.renderError(w, oe)
	})
}

func (s *Server) logFailure(r *http.Request, oe *oauthError) {
	if oe.Status >= 500 {
		s.logger.Error("oauth request failed", attrPath, r.URL.Path, "error", oe.Code, attrErr, oe.Err)
	} else {
		s.logger.Debug("oauth request refused", attrPath, r.URL.Path, "error", oe.Code, "description", oe.Description, attrErr, oe.Err)
	}
}

func cors(h http.Header) {
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, MCP-Protocol-Version")
	h.Set("Access-Control-Max-Age", "600")
}

// routes registers every endpoint under the public URL's path prefix and,
// when there is one, also without it.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, path string, h http.Handler) {
		mux.Handle(method+" "+s.prefix+path, h)
		if s.prefix != "" {
			mux.Handle(method+" "+path, h)
		}
	}
	api := func(path string, methods []string, h handlerFunc) {
		a := s.api(h)
		for _, m := range append(methods, http.MethodOptions) {
			handle(m, path, a)
		}
	}
	get, post := []string{http.MethodGet}, []string{http.MethodPost}

	api("/.well-known/oauth-authorization-server", get, s.serveMetadata)
	api("/.well-known/openid-configuration", get, s.serveMetadata)
	if s.prefix != "" {
		// RFC 8414 section 3.1: the well-known segment goes between the
		// host and the issuer's path.
		for _, wk := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
			a := s.api(s.serveMetadata)
			mux.Handle("GET "+wk+s.prefix, a)
			mux.Handle("OPTIONS "+wk+s.prefix, a)
		}
	}
	api("/oauth/jwks", get, s.serveJWKS)
	api("/oauth/register", post, s.serveRegister)
	api("/oauth/token", post, s.serveToken)
	api("/oauth/revoke", post, s.serveRevoke)
	handle(http.MethodGet, "/oauth/authorize", s.page(s.serveAuthorize))
	handle(http.MethodGet, "/oauth/callback", s.page(s.serveCallback))
	handle(http.MethodPost, "/oauth/login", s.page(s.serveLogin))
	handle(http.MethodGet, "/oauth/consent", s.page(s.serveConsentPage))
	handle(http.MethodPost, "/oauth/consent", s.page(s.serveConsent))
	return mux
}

// issuerPath is the path of an issuer URL ("" or "/p"), which the
// endpoints' paths, as the browser sees them, start with.
func issuerPath(issuer string) string {
	u, err := url.Parse(issuer)
	if err != nil {
		return ""
	}
	return u.EscapedPath()
}

// readForm parses an application/x-www-form-urlencoded body of at most
// maxBodySize bytes, refusing a parameter sent twice (RFC 6749 section
// 3.1 and 3.2) and a body of another type. Only the body counts: query
// parameters are ignored, as RFC 6749 section 3.2 asks of the token
// endpoint.
func readForm(w http.ResponseWriter, r *http.Request) (url.Values, error) {
	ct := r.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	if !strings.EqualFold(strings.TrimSpace(ct), "application/x-www-form-urlencoded") {
		return nil, errInvalidRequest("the body must be application/x-www-form-urlencoded")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodySize))
	if err != nil {
		return nil, errInvalidRequest("the body is too large or unreadable")
	}
	v, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, errInvalidRequest("the body is not valid form encoding")
	}
	for _, vs := range v {
		if len(vs) > 1 {
			return nil, errInvalidRequest("a parameter is repeated")
		}
	}
	return v, nil
}
