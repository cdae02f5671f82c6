package upstream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// ManagerOptions configures a Manager. The zero value of each field means
// its documented default.
type ManagerOptions struct {
	// Servers are the upstream servers by name. The Manager keeps its own
	// copies.
	Servers map[string]*config.Server
	// ClientName/ClientVersion go into clientInfo of initialize.
	ClientName, ClientVersion string
	// ClientCapabilities is advertised to every upstream; nil means {}.
	ClientCapabilities json.RawMessage
	Handler            Handler
	Logger             *slog.Logger // nil: discard
	HTTPClient         *http.Client // nil: a shared default client
	// MaxMessageBytes bounds one message from an upstream, on every
	// transport (config limits.max_upstream_message, S23); 0 means
	// DefaultMaxMessageBytes (16 MiB). A call whose message is larger
	// fails with a *MessageTooLargeError of kind KindInvalidResponse.
	MaxMessageBytes int
	// OnSessionStart is called, outside the Manager's locks, each time a
	// new session is established (the first connect and every reconnect),
	// so that what was learned from the previous one can be refreshed.
	OnSessionStart func(server string, info *InitInfo)
	// MaxBoundPerServer bounds the bound sessions (WithBinding) of one
	// server; past it the least recently used one is closed. 0 means
	// DefaultMaxBoundPerServer.
	MaxBoundPerServer int
	// WaitLogInterval is how often a connect that has not finished logs
	// "still waiting for upstream <name>" (a stdio server that never
	// answers initialize is otherwise silent until its timeout). 0 means
	// DefaultWaitLogInterval.
	WaitLogInterval time.Duration
}

// DefaultWaitLogInterval is ManagerOptions.WaitLogInterval's default.
const DefaultWaitLogInterval = 5 * time.Second

// Health states (C11.3).
const (
	HealthStarting = "starting" // not connected yet
	HealthReady    = "ready"    // a live session
	HealthDegraded = "degraded" // the session was lost; reconnecting
	HealthDown     = "down"     // the last connect attempt failed
)

// Health is the state of one upstream.
type Health struct {
	State     string // HealthStarting, HealthReady, HealthDegraded or HealthDown
	LastError string // the error that caused the state, "" when ready
	// Fault is the fault class of LastError (Classify), "" when ready:
	// what an operator may be shown where the error itself, which names
	// hosts and ports, may not.
	Fault string
	// Since is when the state began; for a server down after losing its
	// session, or failing again and again to connect, the first failure:
	// a retry that fails too does not move it (down since).
	Since time.Time
	// Sessions is the number of live upstream sessions (one per distinct
	// credential in shared mode; the calls in flight in per_call mode).
	Sessions int
	Mode     string // config.SessionShared or config.SessionPerCall
	// Bound is the number of live sessions bound to one downstream party
	// (WithBinding), not counted in Sessions.
	Bound int
}

// failing is the Health of a server in state (HealthDown or
// HealthDegraded) after err, prev being its Health before: a server that
// was already failing keeps the time it began to (Health.Since).
func failing(prev Health, state string, err error, now time.Time, mode string) Health {
	since := now
	if (prev.State == HealthDown || prev.State == HealthDegraded) && !prev.Since.IsZero() {
		since = prev.Since
	}
	return Health{State: state, LastError: err.Error(), Fault: Classify(err).Class, Since: since, Mode: mode}
}

// Reconnect backoff after failures.
const (
	minReconnectBackoff = 250 * time.Millisecond
	maxReconnectBackoff = 30 * time.Second
	// healthyLifetime: a session that lived at least this long before
	// dying is replaced at once; a shorter one counts as a failure.
	healthyLifetime = 5 * time.Second
)

// Pool bounds for servers whose sessions are keyed by the caller's own
// credentials (passthrough): without them, every distinct token would
// keep a session open forever.
const (
	maxPooledPerServer = 256
	pooledIdleTimeout  = 10 * time.Minute
	janitorInterval    = time.Minute
)

// Manager keeps the upstream sessions of every server (C11): in shared mode
// one session per server and effective credential (a pool keyed by the
// credential fingerprint, C3.7), connected lazily (or eagerly with Start),
// replaced when it dies, with exponential backoff after failures; in
// per_call mode a new session for every operation, ended when the
// operation is released. Safe for concurrent use.
type Manager struct {
	opts ManagerOptions
	log  *slog.Logger

	ctx    context.Context // ends with Close: aborts connects and watchers
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// servers is replaced, never written in place (AddServer and
	// RemoveServer copy it under mu), so readers need no lock.
	servers atomic.Pointer[map[string]*server]
	janitor bool // under mu: the idle reaper runs
	eager   bool
	closed  bool
	now     func() time.Time
}

// server is one upstream's configuration and sessions, guarded by
// Manager.mu.
type server struct {
	name     string
	srv      *config.Server
	tokens   *tokenSource // oauth2 client credentials, shared by all sessions
	exch     *exchanger   // oauth2_token_exchange, enterprise_managed: shared by all sessions
	sigv4    *sigV4       // aws_sigv4: config and credentials cache, shared by all sessions
	perCall  bool
	byCaller bool // passthrough, user_api_key, oauth2_user: sessions keyed by the caller's token
	// ownOnly (user_api_key, oauth2_user): a caller without a credential of its own is
	// refused (ErrNoCredential) before anything is dialled.
	ownOnly   bool
	defaultFP string // the fingerprint of the server's own credentials
	entries   map[string]*entry
	// bound are the sessions bound to one party each (WithBinding), by
	// fingerprint and binding key; never handed to anyone else. spares
	// are sessions of ended reusable bindings that no party ever answered
	// (Binding.Reusable), kept for the next.
	bound  map[string]*entry
	spares []spare
	// era is what auto learned of the server (an eraOf).
	era atomic.Int32
	// barrenRun: sessions in a row that expired before serving any
	// request (conn.judgeExpiry).
	barrenRun atomic.Int32
	// maybeDown is set when a failed call marks an entry down (observe)
	// and cleared once no entry is: until then a successful call takes
	// the lock to mark its entry ready again; after, it costs one load.
	maybeDown atomic.Bool
	// per_call mode has no entries: its health is the outcome of the
	// latest connect, and live counts the sessions in use.
	health Health
	live   int
}

// entry is one pooled session (one credential) of a server, guarded by
// Manager.mu.
type entry struct {
	name        string
	srv         *config.Server
	fp          string
	callerToken string
	sess        Session
	started     time.Time     // when sess was established
	lastUsed    time.Time     // for the idle reaper of caller-keyed entries
	connecting  chan struct{} // non-nil while a connect runs; closed when it ends
	// failed is the connecting channel of the latest attempt that failed,
	// and failErr its error: a caller that waited on an attempt learns its
	// own outcome, not that of whatever happened to the entry since (the
	// new session may have come and gone already).
	failed   chan struct{}
	failErr  error
	lastErr  error
	failures int
	retryAt  time.Time
	health   Health

	// binding is the key of the party a bound entry serves ("" for a
	// pooled one); origin is its sessions' DefaultOrigin, onStart its
	// Binding.Started.
	binding  string
	origin   any
	onStart  func(ctx context.Context, server string, s Session)
	reusable bool // Binding.Reusable
}

// NewManager builds a Manager; nothing is connected until Session or Start.
func NewManager(o ManagerOptions) *Manager {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		opts:   o,
		log:    o.Logger,
		ctx:    ctx,
		cancel: cancel,
		now:    time.Now,
	}
	servers := make(map[string]*server, len(o.Servers))
	for name, srv := range o.Servers {
		if srv != nil {
			servers[name] = m.newServer(name, srv)
		}
	}
	m.servers.Store(&servers)
	m.opts.Servers = nil
	m.startJanitorLocked(servers)
	return m
}

func (m *Manager) newServer(name string, srv *config.Server) *server {
	c := *srv
	if c.Name == "" {
		c.Name = name
	}
	sv := &server{
		name:      name,
		srv:       &c,
		perCall:   c.SessionMode == config.SessionPerCall,
		byCaller:  c.Auth != nil && (c.Auth.Type == config.AuthPassthrough || c.Auth.Type == config.AuthUserAPIKey || c.Auth.Type == config.AuthOAuth2User || config.ExchangesCallerToken(c.Auth.Type)),
		ownOnly:   c.Auth != nil && (c.Auth.Type == config.AuthUserAPIKey || c.Auth.Type == config.AuthOAuth2User || config.ExchangesCallerToken(c.Auth.Type)),
		defaultFP: Fingerprint(&c, ""),
		entries:   map[string]*entry{},
		bound:     map[string]*entry{},
		health:    Health{State: HealthStarting, Since: m.now()},
	}
	sv.health.Mode = modeOf(sv)
	if c.Auth != nil && c.Auth.Type == config.AuthOAuth2 {
		sv.tokens = newTokenSource(c.Name, cmp.Or(c.URL, c.BaseURL), c.Auth, tokenHTTPClient(&c, m.opts.HTTPClient), m.log)
	}
	sv.exch = newExchanger(c.Name, c.URL, c.Auth, tokenHTTPClient(&c, m.opts.HTTPClient), m.log)
	sv.sigv4 = newSigV4(&c)
	return sv
}

// startJanitorLocked starts the idle reaper once some server pools
// sessions per caller.
func (m *Manager) startJanitorLocked(servers map[string]*server) {
	if m.janitor {
		return
	}
	for _, sv := range servers {
		if sv.byCaller && !sv.perCall {
			m.janitor = true
			m.wg.Go(m.reapIdle)
			return
		}
	}
}

// serverMap is the current set of servers (never modified: replaced).
func (m *Manager) serverMap() map[string]*server { return *m.servers.Load() }

// AddServer adds an upstream server at runtime (or replaces one of that
// name, whose sessions are retired: their calls in flight finish, new
// calls go to the new configuration's sessions). It connects lazily, or
// at once after Start.
func (m *Manager) AddServer(name string, srv *config.Server) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	old := m.serverMap()
	next := make(map[string]*server, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	sv := m.newServer(name, srv)
	next[name] = sv
	m.servers.Store(&next)
	m.startJanitorLocked(next)
	if prev := old[name]; prev != nil {
		m.retireServerLocked(prev)
	}
	if m.eager && !sv.perCall && !sv.byCaller {
		m.connectLocked(sv, m.entryLocked(sv, context.Background()))
	}
	m.mu.Unlock()
	return nil
}

// RemoveServer removes an upstream server and retires its sessions: new
// calls fail as to an unknown server at once, the calls in flight get
// their answers, and each session closes when its last one is over, at
// the latest after the server's timeout.
func (m *Manager) RemoveServer(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := m.serverMap()
	sv := old[name]
	if sv == nil {
		return false
	}
	next := make(map[string]*server, len(old))
	for k, v := range old {
		if k != name {
			next[k] = v
		}
	}
	m.servers.Store(&next)
	m.retireServerLocked(sv)
	return true
}

// retireServerLocked retires every session of a server no longer served
// (or served with another configuration): each closes once its calls in
// flight are over (drainLocked); connects in flight see the server gone
// and close what they made. Spares serve nobody and close at once.
func (m *Manager) retireServerLocked(sv *server) {
	for _, e := range sv.entries {
		m.drainLocked(sv, e)
	}
	for _, e := range sv.bound {
		m.drainLocked(sv, e)
	}
	m.closeSparesLocked(sv)
}

// drainLocked is dropLocked for a session that may have calls in flight:
// it takes no new ones and closes once they are over, bounded by the
// server's timeout (their own read timeout) and by Close.
func (m *Manager) drainLocked(sv *server, e *entry) {
	s := e.sess
	e.sess = nil
	m.dropLocked(sv, e)
	if s == nil {
		return
	}
	r, ok := s.(interface {
		retire(stop <-chan struct{}, budget time.Duration) error
	})
	if !ok {
		m.wg.Go(func() { s.Close() })
		return
	}
	m.wg.Go(func() { r.retire(m.ctx.Done(), sv.srv.Timeout) })
}

func modeOf(sv *server) string {
	if sv.perCall {
		return config.SessionPerCall
	}
	return config.SessionShared
}

type callerTokensKey struct{}

// WithCallerTokens attaches the caller's own upstream credentials to ctx:
// tokens(server) is the token the caller presented for server, or the
// credential the caller stored for it (user_api_key), "" for none. Only
// servers with auth type passthrough or user_api_key use it; their
// sessions are pooled per caller credential. tokens may be called under
// the Manager's lock: it must be cheap after its first call for a server
// (the Manager asks once before taking the lock).
func WithCallerTokens(ctx context.Context, tokens func(server string) string) context.Context {
	return context.WithValue(ctx, callerTokensKey{}, &callerTokens{get: tokens})
}

// callerTokens is WithCallerTokens' value: the request's tokens, and the
// credential fingerprints worked out from them. A call asks for its
// server's fingerprint more than once (its catalog's key, its pooled
// session, the latter under the Manager's lock); the memo hashes once per
// server config and token. It belongs to one request: its lock is never
// contended across callers.
type callerTokens struct {
	get func(server string) string
	mu  sync.Mutex
	fps []fingerprintMemo // one or two servers per request
}

// maxFingerprintMemo bounds a request's fingerprint memo.
const maxFingerprintMemo = 16

type fingerprintMemo struct {
	srv     *config.Server
	tok, fp string
}

// callerFingerprint is Fingerprint(sv.srv, the caller's token for sv),
// from ctx's request memo when it has one; tok is that token.
func callerFingerprint(ctx context.Context, sv *server) (fp, tok string) {
	ct, _ := ctx.Value(callerTokensKey{}).(*callerTokens)
	if ct == nil || ct.get == nil {
		return Fingerprint(sv.srv, ""), ""
	}
	tok = ct.get(sv.name)
	ct.mu.Lock()
	for _, m := range ct.fps {
		// The config and the token both: a reload or a reconnect within
		// the request makes another fingerprint.
		if m.srv == sv.srv && m.tok == tok {
			ct.mu.Unlock()
			return m.fp, tok
		}
	}
	ct.mu.Unlock()
	fp = Fingerprint(sv.srv, tok)
	ct.mu.Lock()
	if len(ct.fps) >= maxFingerprintMemo {
		ct.fps = ct.fps[:0] // a context that outlives many tokens: start over
	}
	ct.fps = append(ct.fps, fingerprintMemo{srv: sv.srv, tok: tok, fp: fp})
	ct.mu.Unlock()
	return fp, tok
}

// ErrNoCredential is in the chain of the error of an operation on a
// user_api_key server for a caller who has stored no credential for it:
// nothing was sent upstream.
var ErrNoCredential = errors.New("no credential of the caller's own stored for this server")

// checkOwn refuses a user_api_key server to a caller without a
// credential. It resolves the caller's token outside the Manager's lock.
func checkOwn(ctx context.Context, sv *server) error {
	if sv != nil && sv.ownOnly && callerTokenFrom(ctx, sv.name) == "" {
		if sv.exch != nil {
			return &Error{Server: sv.name, Kind: KindAuth, Err: ErrNoSubjectToken}
		}
		return &Error{Server: sv.name, Kind: KindAuth, Err: ErrNoCredential}
	}
	return nil
}

func callerTokenFrom(ctx context.Context, server string) string {
	if ct, ok := ctx.Value(callerTokensKey{}).(*callerTokens); ok && ct.get != nil {
		return ct.get(server)
	}
	return ""
}

// Fingerprint returns the credential fingerprint the sessions of server
// are pooled under for ctx's caller (C3.7); "" for an unknown server.
func (m *Manager) Fingerprint(ctx context.Context, server string) string {
	sv := m.serverMap()[server]
	if sv == nil {
		return ""
	}
	if !sv.byCaller {
		return sv.defaultFP
	}
	fp, _ := callerFingerprint(ctx, sv)
	return fp
}

// CredentialKey is Fingerprint for servers whose sessions are keyed by the
// caller's own credentials (passthrough), and "" for the others, whose
// callers all share the server's credentials.
func (m *Manager) CredentialKey(ctx context.Context, server string) string {
	sv := m.serverMap()[server]
	if sv == nil || !sv.byCaller {
		return ""
	}
	fp, _ := callerFingerprint(ctx, sv)
	return fp
}

// DefaultFingerprint is the fingerprint of server's own credentials.
func (m *Manager) DefaultFingerprint(server string) string {
	if sv := m.serverMap()[server]; sv != nil {
		return sv.defaultFP
	}
	return ""
}

// Acquire returns a session of server for ctx's caller and a release
// function to call when the operation is over. In shared mode it is the
// pooled session of the caller's credentials and release does nothing;
// in per_call mode it is a new session, and release ends it (the DELETE
// included) within CloseTimeout, before returning (C9.1).
//
// The session's Call recovers from session expiry as Manager.Call does
// (the request goes again on a new session), so an operation of several
// calls on one acquired session (a catalog walk) survives an upstream
// ending the session between them. Everything else is the acquired
// session's own: Info, Done and Err describe it and Notify uses it.
func (m *Manager) Acquire(ctx context.Context, server string) (Session, func(), error) {
	s, release, err := m.acquire(ctx, server)
	if err != nil {
		return nil, nil, err
	}
	return &recovering{Session: s, m: m, server: server}, release, nil
}

// recovering is an acquired session whose calls are retried on a new
// session when the upstream says this one expired.
type recovering struct {
	Session
	m      *Manager
	server string
}

func (r *recovering) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	return r.m.call(ctx, r.server, r.Session, method, params)
}

// acquire is Acquire without the recovering wrapper.
func (m *Manager) acquire(ctx context.Context, server string) (Session, func(), error) {
	sv := m.serverMap()[server]
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	switch {
	case closed:
		return nil, nil, &Error{Server: server, Kind: KindClosed, Err: ErrClosed}
	case sv == nil:
		return nil, nil, fmt.Errorf("unknown upstream server %q", server)
	}
	if err := checkOwn(ctx, sv); err != nil {
		return nil, nil, err
	}
	switch {
	case !sv.perCall:
		s, err := m.Session(ctx, server)
		return s, func() {}, err
	}
	var origin any
	b := bindingFrom(ctx)
	if b != nil {
		origin = b.Origin
	}
	stopWaiting := m.logWhileWaiting(sv)
	s, err := m.dial(ctx, sv, callerTokenFrom(ctx, server), origin)
	stopWaiting()
	if err == nil && b != nil && b.Started != nil {
		b.Started(ctx, server, s)
	}
	if n := notesFrom(ctx); n != nil && err == nil {
		n.SessionUsed(server, true)
	}
	now := m.now()
	m.mu.Lock()
	if err != nil {
		sv.health = failing(sv.health, HealthDown, err, now, config.SessionPerCall)
		m.mu.Unlock()
		return nil, nil, err
	}
	if sv.health.State != HealthReady {
		sv.health = Health{State: HealthReady, Since: now, Mode: config.SessionPerCall}
	}
	sv.live++
	m.mu.Unlock()
	var once sync.Once
	return s, func() {
		once.Do(func() {
			if err := s.Close(); err != nil {
				m.log.Debug("per-call session close", logKeyServer, server, "error", err)
			}
			m.mu.Lock()
			sv.live--
			m.mu.Unlock()
		})
	}, nil
}

// Bounds of the recovery from session expiry (Call).
const (
	// maxExpiryRetries caps the re-sends of one request however much the
	// upstream serves in between. An upstream that serves n requests per
	// session, under c concurrent callers, takes about c/n rounds for the
	// unluckiest; 256 leaves that room at c=64, n=3.
	maxExpiryRetries = 256
	// maxBarrenExpiries: when this many sessions of the server in a row
	// expired without having served any request at all, the upstream is
	// taken to refuse every session: a call meeting one more fails.
	maxBarrenExpiries = 2
)

// Call runs one request on server for ctx's caller.
//
// When the upstream says the session expired (HTTP 404 on the session,
// C6.4), the request never reached a tool, so it is sent again on a new
// session (C11.2), as often as it takes while the upstream is making
// progress: however soon the new session expires too (a server that ends
// sessions after every few calls), and however many callers meet the
// same expiry: they share one re-dial (Session) and each retries on the
// new session. It stops when maxBarrenExpiries sessions in a row expired
// without serving any request (the upstream refuses every session: a
// clear error, at once), after maxExpiryRetries, or when ctx ends.
func (m *Manager) Call(ctx context.Context, server, method string, params json.RawMessage) (json.RawMessage, error) {
	return m.call(ctx, server, nil, method, params)
}

// call is Call, on first when it is non-nil (an acquired session).
func (m *Manager) call(ctx context.Context, server string, first Session, method string, params json.RawMessage) (json.RawMessage, error) {
	retries := 0
	for {
		s, release := first, func() {}
		if s == nil {
			var err error
			if s, release, err = m.acquire(ctx, server); err != nil {
				return nil, err
			}
		}
		first = nil
		notes := notesFrom(ctx)
		var began time.Time
		if notes != nil {
			began = time.Now()
		}
		res, err := s.Call(ctx, method, params)
		if notes != nil {
			notes.Called(server, method, began, time.Since(began))
		}
		release()
		m.observe(server, s, err)
		if err == nil {
			return res, nil // the common case, before errors.As's target escapes
		}
		var notSent *notSentError
		if errors.Is(err, ErrRetired) && errors.As(err, &notSent) && ctx.Err() == nil {
			// The server was replaced (or removed) after this session was
			// handed out and before the request left: it goes to the new
			// configuration's session, or fails as to an unknown server.
			if retries++; retries > maxExpiryRetries {
				return nil, err
			}
			continue
		}
		if !sessionExpired(err) || ctx.Err() != nil {
			return res, err
		}
		if errors.As(err, &notSent) {
			// The session had expired before this request was sent
			// (another caller met the 404): nothing learned of the
			// upstream. Not counted: this only goes on while others'
			// requests expire sessions, and they count theirs.
			continue
		}
		if j, ok := s.(interface {
			judgeExpiry(context.Context) (bool, int)
		}); ok {
			if served, barren := j.judgeExpiry(ctx); !served && barren >= maxBarrenExpiries {
				return nil, expiryGiveUp(server, err, fmt.Sprintf("%d sessions in a row expired before serving any request", barren))
			}
		}
		if retries++; retries > maxExpiryRetries {
			return nil, expiryGiveUp(server, err, fmt.Sprintf("the session expired %d times in a row for one request", retries))
		}
		m.log.Debug("upstream session expired; sending the request again on a new session", logKeyServer, server, "method", method)
	}
}

// observe keeps a shared server's health current with what its calls
// meet (C11.3): a pooled HTTP session is only an id, so an upstream that
// went away does not end it (nothing would mark the server down while
// every call failed with connection refused); a call that cannot reach
// the upstream marks the session's entry down, and the next call that
// gets any answer marks it ready again. The session itself is kept: if
// the upstream came back without it, the 404 on the next call replaces
// it (C6.4).
func (m *Manager) observe(server string, s Session, err error) {
	sv := m.serverMap()[server]
	if sv == nil || sv.perCall {
		return
	}
	kind := Kind("")
	if err != nil {
		kind = KindOf(err)
	}
	down := kind == KindUnreachable
	if !down && !sv.maybeDown.Load() {
		return // the hot path: nothing to record
	}
	if kind == KindClosed {
		return // says nothing of the upstream's reachability
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	anyDown := false
	for _, e := range sv.entries {
		if e.sess == s {
			switch {
			case down && e.health.State != HealthDown:
				e.health = failing(e.health, HealthDown, err, now, config.SessionShared)
				m.log.Warn("upstream unreachable", logKeyServer, server, "error", err)
			case !down && e.health.State == HealthDown:
				e.health = Health{State: HealthReady, Since: now, Mode: config.SessionShared}
				m.log.Info("upstream reachable again", logKeyServer, server)
			}
		}
		anyDown = anyDown || e.health.State == HealthDown
	}
	sv.maybeDown.Store(anyDown)
}

// expiryGiveUp is the error of a request whose session kept expiring:
// the expiry (ErrSessionExpired, the upstream's JSON-RPC error) with why
// it was not sent again.
func expiryGiveUp(server string, err error, why string) error {
	var ue *Error
	if !errors.As(err, &ue) {
		return err
	}
	return &Error{Server: server, Kind: ue.Kind, Status: ue.Status, Err: fmt.Errorf("%s: %w", why, ue.Err)}
}

// PerCall reports whether server opens a new session for every
// operation (session_mode per_call): it has no pooled session to probe.
func (m *Manager) PerCall(server string) bool {
	sv := m.serverMap()[server]
	return sv != nil && sv.perCall
}

// Stateless reports whether server's last session spoke the stateless era
// (2026-07-28): its results carry that era's members.
func (m *Manager) Stateless(server string) bool {
	sv := m.serverMap()[server]
	return sv != nil && eraOf(sv.era.Load()) == eraStateless
}

// dial connects a new session of sv; origin is its DefaultOrigin.
func (m *Manager) dial(ctx context.Context, sv *server, callerToken string, origin any) (Session, error) {
	srv := sv.srv
	era := eraOf(sv.era.Load())
	if era == eraStateless && probesDiscover(srv) {
		// Learned: go straight to the stateless era.
		pinned := *srv
		pinned.ProtocolVersion = mcpwire.Rev20260728
		srv = &pinned
	}
	s, err := Connect(ctx, Options{
		Server:             srv,
		ProbeStateless:     era == eraUnknown,
		ClientName:         m.opts.ClientName,
		ClientVersion:      m.opts.ClientVersion,
		ClientCapabilities: m.opts.ClientCapabilities,
		Handler:            m.opts.Handler,
		Logger:             m.log,
		HTTPClient:         m.opts.HTTPClient,
		MaxMessageBytes:    m.opts.MaxMessageBytes,
		CallerToken:        callerToken,
		DefaultOrigin:      origin,
		tokens:             sv.tokens,
		exchanger:          sv.exch,
		sigv4:              sv.sigv4,
		barrenRun:          &sv.barrenRun,
	})
	switch {
	case err == nil && s.Info().ProtocolVersion == mcpwire.Rev20260728:
		sv.era.Store(int32(eraStateless))
	case err == nil:
		sv.era.Store(int32(eraHandshake))
	case era == eraStateless:
		// It spoke the stateless era before and does not now: learn again.
		sv.era.Store(int32(eraUnknown))
	}
	return s, err
}

// What the Manager learned of a server's era (protocol_version auto).
type eraOf int32

const (
	eraUnknown eraOf = iota
	eraHandshake
	eraStateless
)

// Session returns the live shared session of server for ctx's caller,
// connecting it if needed. Concurrent callers share one connect attempt;
// a dead session is replaced. After a failed attempt, new attempts wait
// for a backoff (250ms doubling to 30s) and in the meantime the last error
// is returned at once. A per_call server has no shared session: use
// Acquire.
func (m *Manager) Session(ctx context.Context, server string) (Session, error) {
	if err := checkOwn(ctx, m.serverMap()[server]); err != nil {
		return nil, err
	}
	waited := false // for a connect: the session is a new one
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, &Error{Server: server, Kind: KindClosed, Err: ErrClosed}
		}
		sv := m.serverMap()[server]
		if sv == nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("unknown upstream server %q", server)
		}
		if sv.perCall {
			m.mu.Unlock()
			return nil, &Error{Server: server, Kind: KindInternal, Err: errors.New("server uses per_call sessions: no shared session")}
		}
		e := m.entryLocked(sv, ctx)
		e.lastUsed = m.now()
		if s := e.sess; s != nil {
			select {
			case <-s.Done():
				m.retireLocked(e, s)
			default:
				m.mu.Unlock()
				if n := notesFrom(ctx); n != nil {
					n.SessionUsed(server, waited)
				}
				return s, nil
			}
		}
		if e.connecting == nil {
			if time.Now().Before(e.retryAt) && e.lastErr != nil {
				err := e.lastErr
				m.mu.Unlock()
				return nil, err
			}
			m.connectFromLocked(ctx, sv, e)
		}
		wait := e.connecting
		m.mu.Unlock()
		waited = true

		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("upstream %s: waiting for connection: %w", server, ctx.Err())
		}
		m.mu.Lock()
		if e.failed == wait {
			err := e.failErr
			m.mu.Unlock()
			return nil, err // this attempt failed: report it, don't start another
		}
		m.mu.Unlock()
	}
}

// entryLocked returns the pool entry of sv for ctx's caller, creating it
// (and evicting the least recently used caller entry past the cap).
func (m *Manager) entryLocked(sv *server, ctx context.Context) *entry {
	fp, tok := sv.defaultFP, ""
	if sv.byCaller {
		fp, tok = callerFingerprint(ctx, sv)
	}
	if b := bindingFrom(ctx); b != nil && !sv.statelessEra() {
		return m.boundEntryLocked(sv, fp, tok, b)
	}
	if e := sv.entries[fp]; e != nil {
		return e
	}
	if len(sv.entries) >= maxPooledPerServer {
		m.evictLocked(sv)
	}
	e := &entry{name: sv.name, srv: sv.srv, fp: fp, callerToken: tok,
		health: Health{State: HealthStarting, Since: m.now(), Mode: config.SessionShared}}
	sv.entries[fp] = e
	return e
}

// evictLocked closes the least recently used idle entry of sv.
func (m *Manager) evictLocked(sv *server) {
	var victim *entry
	for _, e := range sv.entries {
		if e.connecting == nil && (victim == nil || e.lastUsed.Before(victim.lastUsed)) {
			victim = e
		}
	}
	if victim != nil {
		m.dropLocked(sv, victim)
	}
}

func (m *Manager) dropLocked(sv *server, e *entry) {
	if e.binding != "" {
		delete(sv.bound, e.fp)
	} else {
		delete(sv.entries, e.fp)
	}
	if s := e.sess; s != nil {
		e.sess = nil
		m.wg.Go(func() { s.Close() })
	}
}

// reapIdle closes caller-keyed sessions nobody used for pooledIdleTimeout.
func (m *Manager) reapIdle() {
	t := time.NewTicker(janitorInterval)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		now := m.now()
		m.mu.Lock()
		for _, sv := range m.serverMap() {
			m.reapBoundLocked(sv, now)
			if !sv.byCaller {
				continue
			}
			for _, e := range sv.entries {
				if e.connecting == nil && now.Sub(e.lastUsed) > pooledIdleTimeout {
					m.drainLocked(sv, e)
				}
			}
		}
		m.mu.Unlock()
	}
}

// connectLocked starts a connect attempt for e in the background: it does
// not belong to any one caller, so a caller giving up does not abort it.
func (m *Manager) connectLocked(sv *server, e *entry) {
	e.connecting = make(chan struct{})
	m.wg.Go(func() { m.connect(m.ctx, sv, e) })
}

// connectFromLocked is connectLocked for the request ctx that waits for
// it: within a traced request the connect's spans (process start,
// handshake) are under the request's.
func (m *Manager) connectFromLocked(ctx context.Context, sv *server, e *entry) {
	e.connecting = make(chan struct{})
	cctx := tracing.Within(m.ctx, ctx)
	m.wg.Go(func() { m.connect(cctx, sv, e) })
}

// connect dials e; ctx is m.ctx, perhaps with a request's span.
func (m *Manager) connect(ctx context.Context, sv *server, e *entry) {
	stopWaiting := m.logWhileWaiting(sv)
	s, err := m.dial(ctx, sv, e.callerToken, e.origin)
	stopWaiting()
	if err == nil && e.onStart != nil {
		// Before the session is handed out (callers wait on e.connecting):
		// a bound session is set up for its party before its first call.
		e.onStart(ctx, sv.name, s)
	}
	now := time.Now()
	m.mu.Lock()
	done := e.connecting
	e.connecting = nil
	if m.closed || !sv.holds(e) || m.serverMap()[sv.name] != sv {
		m.mu.Unlock()
		close(done)
		if s != nil {
			s.Close()
		}
		return
	}
	if err != nil {
		e.lastErr = err
		e.failed, e.failErr = done, err
		e.failures++
		wait := backoff(e.failures)
		e.retryAt = now.Add(wait)
		e.health = failing(e.health, HealthDown, err, now, config.SessionShared)
		eager := m.eager && e.fp == sv.defaultFP && e.binding == ""
		m.mu.Unlock()
		close(done)
		m.log.Warn("upstream connect failed", logKeyServer, e.name, "error", err, "retry_in", wait.String())
		if eager {
			m.retryLater(sv, e)
		}
		return
	}
	e.sess, e.started, e.lastErr = s, now, nil
	e.health = Health{State: HealthReady, Since: now, Mode: config.SessionShared}
	m.mu.Unlock()
	close(done)
	info := s.Info()
	m.log.Info("upstream session established", logKeyServer, e.name, "protocol_version", info.ProtocolVersion)
	m.wg.Go(func() { m.watch(sv, e, s) })
	if m.opts.OnSessionStart != nil && e.binding == "" {
		// A bound session serves one party: what the server's lists are
		// is learned from the pooled sessions.
		m.opts.OnSessionStart(e.name, info)
	}
}

// logWhileWaiting logs "still waiting for upstream <name>" every
// WaitLogInterval until stop is called, so that an upstream slow to
// answer (a stdio server still installing, or one that never answers
// initialize) is visible before its timeout, which the log line names.
func (m *Manager) logWhileWaiting(sv *server) (stop func()) {
	every := cmp.Or(m.opts.WaitLogInterval, DefaultWaitLogInterval)
	timeout := cmp.Or(sv.srv.Timeout, DefaultTimeout)
	start := time.Now()
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		m.log.Info("still waiting for upstream "+sv.name, logKeyServer, sv.name,
			"waited", time.Since(start).Round(100*time.Millisecond).String(), "timeout", timeout.String())
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

func backoff(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := minReconnectBackoff
	for i := 1; i < failures && d < maxReconnectBackoff; i++ {
		d *= 2
	}
	return min(d, maxReconnectBackoff)
}

// watch notices the end of a session as it happens, so Health is current
// and, after Start, the upstream is reconnected without waiting for a call.
func (m *Manager) watch(sv *server, e *entry, s Session) {
	select {
	case <-s.Done():
	case <-m.ctx.Done():
		return
	}
	m.mu.Lock()
	if e.sess == s {
		m.retireLocked(e, s)
	}
	eager := m.eager && !m.closed && e.fp == sv.defaultFP && e.binding == "" && sv.holds(e)
	m.mu.Unlock()
	if eager {
		m.retryLater(sv, e)
	}
}

// retireLocked drops a dead session from e and releases its resources.
func (m *Manager) retireLocked(e *entry, s Session) {
	now := time.Now()
	e.sess = nil
	e.lastErr = s.Err()
	if e.lastErr == nil {
		e.lastErr = &Error{Server: e.name, Kind: KindClosed, Err: ErrClosed}
	}
	exp, _ := s.(interface {
		expiredFruitfully() bool
		closeWhenDrained(stop <-chan struct{}) error
	})
	barren := false
	if sv := m.serverMap()[e.name]; sv != nil {
		barren = sv.barrenRun.Load() >= maxBarrenExpiries
	}
	switch {
	case barren && sessionExpired(e.lastErr):
		// The upstream refuses every new session (Call): back off, and
		// say so plainly, since during the backoff this is what callers get.
		e.failures++
		e.retryAt = now.Add(max(backoff(e.failures), minReconnectBackoff))
		e.lastErr = expiryGiveUp(e.name, e.lastErr, fmt.Sprintf("%d sessions in a row expired before serving any request", maxBarrenExpiries))
	case errors.As(e.lastErr, new(*MessageTooLargeError)):
		// The stream broke on one oversized reply (legacy SSE, S23): the
		// session was working, and the next call deserves a new one now.
		e.failures = 0
		e.retryAt = time.Time{}
	case exp != nil && exp.expiredFruitfully():
		// The upstream ended a session it had used (C6.4): routine, not a
		// connect failure, however short the session's life. Backing off
		// would fail the callers that retry on a new session.
		e.failures = 0
		e.retryAt = time.Time{}
	case now.Sub(e.started) < healthyLifetime:
		e.failures++
		e.retryAt = now.Add(backoff(e.failures - 1)) // the first quick death is retried at once
		if sessionExpired(e.lastErr) {
			// Said plainly: during the backoff this is what callers get.
			e.lastErr = expiryGiveUp(e.name, e.lastErr, "new session expired before serving a request")
		}
	default:
		e.failures = 0
		e.retryAt = time.Time{}
	}
	e.health = failing(e.health, HealthDegraded, e.lastErr, now, config.SessionShared)
	if sessionExpired(e.lastErr) {
		m.log.Info("upstream session expired; a new one is established on the next call", logKeyServer, e.name)
	} else {
		m.log.Warn("upstream session ended", logKeyServer, e.name, "error", e.lastErr)
	}
	if exp != nil && sessionExpired(s.Err()) {
		// Calls sent before the expiry still get their answers.
		m.wg.Go(func() { exp.closeWhenDrained(m.ctx.Done()) })
		return
	}
	m.wg.Go(func() { s.Close() })
}

// retryLater reconnects e once its backoff has passed (eager mode).
func (m *Manager) retryLater(sv *server, e *entry) {
	m.wg.Go(func() {
		m.mu.Lock()
		delay := time.Until(e.retryAt)
		m.mu.Unlock()
		if delay > 0 && !sleepCtx(m.ctx, delay) {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.closed && e.sess == nil && e.connecting == nil && sv.holds(e) {
			m.connectLocked(sv, e)
		}
	})
}

// Start connects every shared server with its own credentials in the
// background (stdio processes start at once) and keeps them connected: a
// lost session is re-established after its backoff without waiting for a
// call. Servers keyed by the caller's credentials and per_call servers
// connect when used. It returns immediately.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || ctx.Err() != nil {
		return
	}
	m.eager = true
	for _, sv := range m.serverMap() {
		if sv.perCall || sv.byCaller {
			continue
		}
		e := m.entryLocked(sv, context.Background())
		if e.sess == nil && e.connecting == nil {
			m.connectLocked(sv, e)
		}
	}
}

// Health returns the state of every server: in shared mode that of the
// session with the server's own credentials, or for a passthrough server
// of its most recently used caller session.
func (m *Manager) Health() map[string]Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Health, len(m.serverMap()))
	for name, sv := range m.serverMap() {
		if sv.perCall {
			h := sv.health
			h.Sessions = sv.live
			out[name] = h
			continue
		}
		var pick *entry
		live := 0
		for _, e := range sv.entries {
			if e.sess != nil {
				live++
			}
			if e.fp == sv.defaultFP && !sv.byCaller {
				pick = e
			} else if sv.byCaller && (pick == nil || e.lastUsed.After(pick.lastUsed)) {
				pick = e
			}
		}
		h := sv.health
		if pick != nil {
			h = pick.health
			if s := pick.sess; s != nil {
				select {
				case <-s.Done():
					h = Health{State: HealthDegraded, Since: h.Since}
					if err := s.Err(); err != nil {
						h.LastError, h.Fault = err.Error(), Classify(err).Class
					}
				default:
				}
			}
		}
		h.Sessions, h.Mode = live, config.SessionShared
		for _, e := range sv.bound {
			if e.sess != nil {
				h.Bound++
			}
		}
		out[name] = h
	}
	return out
}

// Close closes every session (stopping stdio process groups) and waits for
// the Manager's goroutines. Session returns ErrClosed afterwards.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	var sessions []Session
	now := time.Now()
	for _, sv := range m.serverMap() {
		for _, e := range sv.entries {
			if e.sess != nil {
				sessions = append(sessions, e.sess)
				e.sess = nil
			}
			e.health = Health{State: HealthDown, LastError: ErrClosed.Error(), Since: now, Mode: config.SessionShared}
		}
		for _, e := range sv.bound {
			if e.sess != nil {
				sessions = append(sessions, e.sess)
				e.sess = nil
			}
		}
		for _, sp := range sv.spares {
			sessions = append(sessions, sp.sess)
		}
		sv.spares = nil
		sv.health = Health{State: HealthDown, LastError: ErrClosed.Error(), Since: now, Mode: modeOf(sv)}
	}
	m.mu.Unlock()
	m.cancel()

	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() { errs[i] = s.Close() })
	}
	wg.Wait()
	m.wg.Wait()
	return errors.Join(errs...)
}
