package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
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
	MaxMessageBytes    int          // 0: DefaultMaxMessageBytes
	// OnSessionStart is called, outside the Manager's locks, each time a
	// new session is established (the first connect and every reconnect),
	// so that what was learned from the previous one can be refreshed.
	OnSessionStart func(server string, info *InitInfo)
}

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
	Since     time.Time
}

// Reconnect backoff after failures.
const (
	minReconnectBackoff = 250 * time.Millisecond
	maxReconnectBackoff = 30 * time.Second
	// healthyLifetime: a session that lived at least this long before
	// dying is replaced at once; a shorter one counts as a failure.
	healthyLifetime = 5 * time.Second
)

// Manager keeps one shared session per upstream server, connected lazily
// (or eagerly with Start), replaced when it dies, with exponential backoff
// after failures. Safe for concurrent use.
type Manager struct {
	opts ManagerOptions
	log  *slog.Logger

	ctx    context.Context // ends with Close: aborts connects and watchers
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*entry
	eager   bool
	closed  bool
}

// entry is one upstream's state, guarded by Manager.mu.
type entry struct {
	name       string
	srv        *config.Server
	sess       Session
	started    time.Time     // when sess was established
	connecting chan struct{} // non-nil while a connect runs; closed when it ends
	lastErr    error
	failures   int
	retryAt    time.Time
	health     Health
}

// NewManager builds a Manager; nothing is connected until Session or Start.
func NewManager(o ManagerOptions) *Manager {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		opts:    o,
		log:     o.Logger,
		ctx:     ctx,
		cancel:  cancel,
		entries: make(map[string]*entry, len(o.Servers)),
	}
	now := time.Now()
	for name, srv := range o.Servers {
		if srv == nil {
			continue
		}
		s := *srv
		if s.Name == "" {
			s.Name = name
		}
		m.entries[name] = &entry{name: name, srv: &s, health: Health{State: HealthStarting, Since: now}}
	}
	m.opts.Servers = nil
	return m
}

// Session returns the live session of server, connecting it if needed.
// Concurrent callers share one connect attempt; a dead session is replaced.
// After a failed attempt, new attempts wait for a backoff (250ms doubling
// to 30s) and in the meantime the last error is returned at once.
func (m *Manager) Session(ctx context.Context, server string) (Session, error) {
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			return nil, &Error{Server: server, Kind: KindClosed, Err: ErrClosed}
		}
		e := m.entries[server]
		if e == nil {
			m.mu.Unlock()
			return nil, fmt.Errorf("unknown upstream server %q", server)
		}
		if s := e.sess; s != nil {
			select {
			case <-s.Done():
				m.retireLocked(e, s)
			default:
				m.mu.Unlock()
				return s, nil
			}
		}
		if e.connecting == nil {
			if time.Now().Before(e.retryAt) && e.lastErr != nil {
				err := e.lastErr
				m.mu.Unlock()
				return nil, err
			}
			m.connectLocked(e)
		}
		wait := e.connecting
		m.mu.Unlock()

		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("upstream %s: waiting for connection: %w", server, ctx.Err())
		}
		m.mu.Lock()
		if e.sess == nil && e.lastErr != nil && e.connecting == nil {
			err := e.lastErr
			m.mu.Unlock()
			return nil, err // this attempt failed: report it, don't start another
		}
		m.mu.Unlock()
	}
}

// connectLocked starts a connect attempt for e in the background: it does
// not belong to any one caller, so a caller giving up does not abort it.
func (m *Manager) connectLocked(e *entry) {
	e.connecting = make(chan struct{})
	m.wg.Go(func() { m.connect(e) })
}

func (m *Manager) connect(e *entry) {
	s, err := Connect(m.ctx, Options{
		Server:             e.srv,
		ClientName:         m.opts.ClientName,
		ClientVersion:      m.opts.ClientVersion,
		ClientCapabilities: m.opts.ClientCapabilities,
		Handler:            m.opts.Handler,
		Logger:             m.log,
		HTTPClient:         m.opts.HTTPClient,
		MaxMessageBytes:    m.opts.MaxMessageBytes,
	})
	now := time.Now()
	m.mu.Lock()
	done := e.connecting
	e.connecting = nil
	if m.closed {
		m.mu.Unlock()
		close(done)
		if s != nil {
			s.Close()
		}
		return
	}
	if err != nil {
		e.lastErr = err
		e.failures++
		wait := backoff(e.failures)
		e.retryAt = now.Add(wait)
		e.health = Health{State: HealthDown, LastError: err.Error(), Since: now}
		eager := m.eager
		m.mu.Unlock()
		close(done)
		m.log.Warn("upstream connect failed", logKeyServer, e.name, "error", err, "retry_in", wait.String())
		if eager {
			m.retryLater(e)
		}
		return
	}
	e.sess, e.started, e.lastErr = s, now, nil
	e.health = Health{State: HealthReady, Since: now}
	m.mu.Unlock()
	close(done)
	info := s.Info()
	m.log.Info("upstream session established", logKeyServer, e.name, "protocol_version", info.ProtocolVersion)
	m.wg.Go(func() { m.watch(e, s) })
	if m.opts.OnSessionStart != nil {
		m.opts.OnSessionStart(e.name, info)
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
func (m *Manager) watch(e *entry, s Session) {
	select {
	case <-s.Done():
	case <-m.ctx.Done():
		return
	}
	m.mu.Lock()
	if e.sess == s {
		m.retireLocked(e, s)
	}
	eager := m.eager && !m.closed
	m.mu.Unlock()
	if eager {
		m.retryLater(e)
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
	if now.Sub(e.started) < healthyLifetime {
		e.failures++
		e.retryAt = now.Add(backoff(e.failures - 1)) // the first quick death is retried at once
	} else {
		e.failures = 0
		e.retryAt = time.Time{}
	}
	e.health = Health{State: HealthDegraded, LastError: e.lastErr.Error(), Since: now}
	m.log.Warn("upstream session ended", logKeyServer, e.name, "error", e.lastErr)
	m.wg.Go(func() { s.Close() })
}

// retryLater reconnects e once its backoff has passed (eager mode).
func (m *Manager) retryLater(e *entry) {
	m.wg.Go(func() {
		m.mu.Lock()
		delay := time.Until(e.retryAt)
		m.mu.Unlock()
		if delay > 0 && !sleepCtx(m.ctx, delay) {
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.closed && e.sess == nil && e.connecting == nil {
			m.connectLocked(e)
		}
	})
}

// Start connects every server in the background (stdio processes start at
// once) and keeps them connected: a lost session is re-established after
// its backoff without waiting for a call. It returns immediately.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || ctx.Err() != nil {
		return
	}
	m.eager = true
	for _, e := range m.entries {
		if e.sess == nil && e.connecting == nil {
			m.connectLocked(e)
		}
	}
}

// Health returns the state of every server.
func (m *Manager) Health() map[string]Health {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Health, len(m.entries))
	for name, e := range m.entries {
		h := e.health
		if e.sess != nil {
			select {
			case <-e.sess.Done():
				h = Health{State: HealthDegraded, Since: h.Since}
				if err := e.sess.Err(); err != nil {
					h.LastError = err.Error()
				}
			default:
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
	for _, e := range m.entries {
		if e.sess != nil {
			sessions = append(sessions, e.sess)
			e.sess = nil
		}
		e.health = Health{State: HealthDown, LastError: ErrClosed.Error(), Since: now}
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
