package upstream

import (
	"context"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// Bound sessions (DESIGN decision 4). Pooled sessions serve every caller
// with the same credentials, and a server keeps per-session state learned
// from its client: roots above all (server-everything asks roots/list once
// per session and answers every later call from that cache). A pooled
// session would hand one caller's answers to the next. A call that carries
// a binding (WithBinding) therefore runs on a session of its own party:
// dialled for that binding, used by no one else, and closed by Unbind when
// the party is gone. Server messages such a session sends outside any call
// belong to that party (its DefaultOrigin), so they need no guessing.
//
// Cost: one upstream session per binding and server it calls (for stdio,
// one process), bounded per server by MaxBoundPerServer (least recently
// used closed first) and reaped after boundIdleTimeout without calls. A
// 2026-07-28 upstream keeps no session state (the capabilities come with
// each request), so a binding is ignored for it.

// DefaultMaxBoundPerServer is the default bound-session cap of a server:
// the config's default (limits.max_bound_sessions_per_server).
var DefaultMaxBoundPerServer = config.DefaultLimits().MaxBoundPerServer

// boundIdleTimeout: a bound session nobody used for this long is closed;
// its party's next call dials a new one.
const boundIdleTimeout = 10 * time.Minute

type bindingCtxKey struct{}

// Binding names the party a call is made for, when that call must run on
// an upstream session of the party's own (WithBinding).
type Binding struct {
	// Key names the party; Unbind(Key) ends its sessions.
	Key string
	// Origin is what the Handler gets for the server messages those
	// sessions send while none of the party's calls is in flight.
	Origin any
	// Started, if set, runs once each of the party's sessions is
	// established, before any call uses it: to repeat on the new session
	// what the party told earlier ones (its log level). It must not call
	// the Manager for the same binding.
	Started func(ctx context.Context, server string, s Session)
	// Reusable: the party is short-lived (one request) and its sessions
	// may serve a later reusable binding once it is unbound, provided no
	// server request ever reached it (the server then holds no answer of
	// it: no roots, no sampling or elicitation result). Such a session
	// waits, party-less, for the next one: a binding per request need not
	// dial per request. A session that asked its party something is closed
	// on Unbind. Started is not run for a reused session.
	Reusable bool
}

// WithBinding makes the calls made with ctx run on sessions bound to one
// party, b. The first call of a binding on a server dials its session;
// later ones reuse it, whatever b's Origin and Started then are.
func WithBinding(ctx context.Context, b Binding) context.Context {
	if b.Key == "" {
		return ctx
	}
	return context.WithValue(ctx, bindingCtxKey{}, &b)
}

func bindingFrom(ctx context.Context) *Binding {
	b, _ := ctx.Value(bindingCtxKey{}).(*Binding)
	return b
}

// statelessEra reports whether sv speaks 2026-07-28 (pinned, or learned).
func (sv *server) statelessEra() bool {
	return sv.srv.ProtocolVersion == mcpwire.Rev20260728 || eraOf(sv.era.Load()) == eraStateless
}

// holds reports whether e is still one of sv's entries.
func (sv *server) holds(e *entry) bool {
	if e.binding != "" {
		return sv.bound[e.fp] == e
	}
	return sv.entries[e.fp] == e
}

// boundEntryLocked returns the entry of binding b on sv for credential fp,
// creating it (and closing the least recently used one past the cap).
// Bound entries are keyed by fingerprint and binding, so a party whose
// credential changes (passthrough) gets a new session too.
func (m *Manager) boundEntryLocked(sv *server, fp, tok string, b *Binding) *entry {
	key := fp + "\x00" + b.Key
	if e := sv.bound[key]; e != nil {
		return e
	}
	limit := m.opts.MaxBoundPerServer
	if limit <= 0 {
		limit = DefaultMaxBoundPerServer
	}
	if len(sv.bound) >= limit {
		var victim *entry
		for _, e := range sv.bound {
			if e.connecting == nil && (victim == nil || e.lastUsed.Before(victim.lastUsed)) {
				victim = e
			}
		}
		if victim != nil {
			m.log.Info("bound upstream sessions at their cap; closing the least recently used", logKeyServer, sv.name, "cap", limit)
			m.dropLocked(sv, victim)
		}
	}
	e := &entry{name: sv.name, srv: sv.srv, fp: key, callerToken: tok, binding: b.Key, origin: b.Origin, onStart: b.Started,
		reusable: b.Reusable, health: Health{State: HealthStarting, Since: m.now(), Mode: config.SessionShared}}
	sv.bound[key] = e
	if b.Reusable {
		m.takeSpareLocked(sv, e, fp)
	}
	if !m.janitor {
		m.janitor = true
		m.wg.Go(m.reapIdle)
	}
	return e
}

// maxSparesPerServer bounds the party-less sessions kept for reusable
// bindings (Binding.Reusable) of one server.
const maxSparesPerServer = 4

// spare is a session of an unbound reusable binding, waiting for the next.
type spare struct {
	fp    string // credential fingerprint
	sess  Session
	since time.Time
}

// takeSpareLocked gives e a live spare session of its credential, if
// there is one.
func (m *Manager) takeSpareLocked(sv *server, e *entry, fp string) {
	for i := len(sv.spares) - 1; i >= 0; i-- {
		sp := sv.spares[i]
		if sp.fp != fp {
			continue
		}
		sv.spares = append(sv.spares[:i], sv.spares[i+1:]...)
		c, _ := sp.sess.(*conn)
		select {
		case <-sp.sess.Done():
			m.wg.Go(func() { sp.sess.Close() })
			continue
		default:
		}
		c.rebind(e.origin)
		e.sess, e.started = sp.sess, m.now()
		e.health = Health{State: HealthReady, Since: e.started, Mode: config.SessionShared}
		return
	}
}

// reapBoundLocked closes sv's bound sessions idle for boundIdleTimeout,
// and its spares.
func (m *Manager) reapBoundLocked(sv *server, now time.Time) {
	for _, e := range sv.bound {
		if e.connecting == nil && now.Sub(e.lastUsed) > boundIdleTimeout {
			m.dropLocked(sv, e)
		}
	}
	kept := sv.spares[:0]
	for _, sp := range sv.spares {
		if now.Sub(sp.since) > boundIdleTimeout {
			m.wg.Go(func() { sp.sess.Close() })
			continue
		}
		kept = append(kept, sp)
	}
	sv.spares = kept
}

// closeSparesLocked closes every spare of sv.
func (m *Manager) closeSparesLocked(sv *server) {
	for _, sp := range sv.spares {
		m.wg.Go(func() { sp.sess.Close() })
	}
	sv.spares = nil
}

// unbindLocked ends e's binding: a reusable entry's session that never
// asked its party anything becomes a spare, any other is closed.
func (m *Manager) unbindLocked(sv *server, e *entry) {
	if e.reusable && e.sess != nil && len(sv.spares) < maxSparesPerServer && !m.closed {
		if c, ok := e.sess.(*conn); ok && c.Err() == nil && c.rebind(nil) {
			fp, _, _ := strings.Cut(e.fp, "\x00")
			sv.spares = append(sv.spares, spare{fp: fp, sess: e.sess, since: m.now()})
			e.sess = nil
		}
	}
	m.dropLocked(sv, e)
}

// Unbind closes every session bound to key, on every server (the party is
// gone: its downstream session ended, or its exchange is over). Calls of
// the binding still in flight fail; a later call with the binding dials
// anew. It does not wait for the sessions to close.
func (m *Manager) Unbind(key string) {
	if key == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sv := range m.serverMap() {
		for _, e := range sv.bound {
			if e.binding == key {
				m.unbindLocked(sv, e)
			}
		}
	}
}

// Bound returns the live sessions bound to key, by server: where a
// notification of that party (roots/list_changed) must go, and only there.
func (m *Manager) Bound(key string) map[string]Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]Session{}
	for name, sv := range m.serverMap() {
		for _, e := range sv.bound {
			if e.binding != key || e.sess == nil {
				continue
			}
			select {
			case <-e.sess.Done():
			default:
				out[name] = e.sess
			}
		}
	}
	return out
}
