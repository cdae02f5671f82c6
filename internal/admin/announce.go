package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Admin changes across a fleet (SPEC S15, issue 14 §3). Every replica
// serves from what it holds in memory: the authenticator's key cache,
// the gateway's servers and toolsets, the grant set, the vault's cache
// of people's credentials. A change made through one replica's API is
// committed to the store first, then announced on the bus (Options.Bus),
// and answered once every replica that heard the announcement applied
// it and confirmed (state.Confirms; at most busTimeout):
//
//	handler: store write -> apply here -> announce(kind, name) -> wait
//	follower (every replica): message -> re-read that object from the
//	  store -> apply -> confirm; gap (Lost, new subscription) -> resync
//	  everything
//
// A message names what changed, never how: the follower re-reads the
// store (or drops its cached copy), so a message carries no value to
// trust, and two replicas changing one object at once both end with what
// the store holds. A message never carries a secret (keys are named by
// alias, vault entries by their keyed hash). Delivery is at most once;
// publishing failures and missing confirmations are logged and never
// fail the request (the change is committed, and the others converge at
// their next resync). A replica that may have missed announcements (its bus not
// heard: the gateway's state.Heard, which this follower reports to)
// re-reads meanwhile what they could have changed: a runtime server
// before each use (checkServer, the gateway's ServerCheck), keys at each
// request (the authenticator, wired by cmd/mcpgate), toolsets, grants and
// vault entries every catchUpEvery. A change the store does not record is
// refused with 503 and never announced (storeError).

// TopicChanges is the bus topic of admin changes; TopicApplied carries
// each replica's confirmation that it applied one ("<change id> <API
// id>").
const (
	TopicChanges = "gateway:admin"
	TopicApplied = "gateway:admin:applied"
)

// busTimeout bounds one publish and one resync, and how long a change
// waits for the other replicas to confirm it.
const busTimeout = 2 * time.Second

// What a change names (change.Kind).
const (
	changeKey     = "key"     // Name: the key's alias
	changeServer  = "server"  // Name: a runtime server
	changeToolset = "toolset" // Name: a runtime toolset
	changeGrant   = "grant"   // Name: "<user|team|role>:<value>"
	// Name: the vault's EntryID of a person's credential or connection
	// (a keyed hash naming neither the person nor the server).
	changeVault = "vault"
	// Name: who reloaded the config file (POST /reload): each replica
	// reloads its own file (reload.go).
	changeReload = "reload"
)

// change is one message on TopicChanges.
type change struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// From is the announcing API (API.id): its own follower skips it.
	From string `json:"from"`
	// ID, when set, asks every replica that applies the change to
	// confirm it on TopicApplied; the announcer waits for them.
	ID string `json:"id,omitempty"`
}

// newInstanceID names this API in its announcements.
func newInstanceID() string { return rand.Text()[:16] }

// announce tells the other replicas that kind name changed, and returns
// once every replica that heard it applied it (a revoked key is then
// refused on every replica, a removed server called on none), or after
// busTimeout. A publish that fails, and replicas that did not confirm
// in time (one that died, is stuck, or runs a version that does not
// confirm), are logged and counted (mcpgate_fleet_unconfirmed_total), and
// the admin request that made the change says so (noteUnconfirmed): the
// change is committed, and they apply it when they hear it or at their
// next resync.
func (a *API) announce(ctx context.Context, kind, name string) {
	if !a.publishChange(ctx, kind, name, true) {
		a.o.Metrics.FleetUnconfirmed(metrics.UnconfirmedAdminChange, 1)
		noteUnconfirmed(ctx)
	}
}

// tell is announce without waiting for the other replicas, for what they
// need not have applied before the change is answered: a reload (each
// replica reloads its own file, which may take longer), a vault write.
func (a *API) tell(ctx context.Context, kind, name string) {
	a.publishChange(ctx, kind, name, false)
}

// publishChange announces the change; with wait, it reports whether
// every replica that heard it confirmed applying it in time (false when
// the publish failed). Without, it reports true.
func (a *API) publishChange(ctx context.Context, kind, name string, wait bool) bool {
	if a.o.Bus == nil {
		return true
	}
	c := change{Kind: kind, Name: name, From: a.id}
	var w *state.Confirm
	if wait {
		c.ID = rand.Text()[:16]
		w = a.confirms.Add(c.ID)
		defer a.confirms.Drop(w)
	}
	msg, _ := json.Marshal(c)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	n, err := a.o.Bus.Publish(ctx, TopicChanges, msg)
	if err != nil {
		a.log.Warn("could not announce an admin change to the other replicas; they apply it at their next resync",
			"kind", kind, "name", name, "error", err)
		return !wait
	}
	if w == nil {
		return true
	}
	a.confirms.Expect(w, n)
	select {
	case <-w.Done():
		return true
	case <-ctx.Done():
		a.log.Warn("not every replica confirmed applying an admin change in time; they apply it when they hear it or at their next resync",
			"kind", kind, "name", name, "waited", busTimeout)
		return false
	}
}

// HeaderUnconfirmed, on the answer to an admin request that changed
// something, counts its changes that not every other replica confirmed
// applying within 2 s (or whose announcement failed): the change is made
// and committed, and those replicas apply it once they hear it or at
// their next resync, but until then they may still serve what it
// replaced. Absent when every replica confirmed (and on a gateway alone).
const HeaderUnconfirmed = "X-Mcpgate-Unconfirmed"

// unconfirmed is what an admin request keeps of its unconfirmed changes:
// its answer's header, set as they happen (announce runs before the
// handler answers), and their count, which the request's audit record
// carries (auditAs). Used by the request's goroutine only.
type unconfirmed struct {
	h http.Header
	n int
}

type unconfirmedKey struct{}

// withUnconfirmed makes ctx count the unconfirmed changes of the request
// answered through h.
func withUnconfirmed(ctx context.Context, h http.Header) context.Context {
	return context.WithValue(ctx, unconfirmedKey{}, &unconfirmed{h: h})
}

// noteUnconfirmed counts one unconfirmed change on ctx's request, if any.
func noteUnconfirmed(ctx context.Context) {
	if u, _ := ctx.Value(unconfirmedKey{}).(*unconfirmed); u != nil {
		u.n++
		u.h.Set(HeaderUnconfirmed, strconv.Itoa(u.n))
	}
}

// unconfirmedOf is how many of ctx's request's changes went unconfirmed.
func unconfirmedOf(ctx context.Context) int {
	if u, _ := ctx.Value(unconfirmedKey{}).(*unconfirmed); u != nil {
		return u.n
	}
	return 0
}

// confirmApplied tells the announcer of change id that this replica
// applied it. A failure is logged: the announcer then reports the change
// as unconfirmed.
func (a *API) confirmApplied(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	if _, err := a.o.Bus.Publish(ctx, TopicApplied, []byte(id+" "+a.id)); err != nil {
		a.log.Warn("could not confirm an admin change to the replica that made it", "error", err)
	}
}

// followName names the follower of admin changes in logs and in the
// gateway's state.Heard.
const followName = "admin changes"

// catchUpEvery is how often a replica that may have missed announcements
// (its bus not heard: the gateway's state.Heard) re-reads what it serves
// from the store: toolsets, grants and vault entries are then at most
// that much behind the other replicas' changes. Runtime servers and keys
// are re-read per use meanwhile (verifyServer, the authenticator's fresh
// lookups), so they are never behind.
const catchUpEvery = time.Second

// Start follows the other replicas' changes, when there is a bus, until
// Close. Call it once, after the runtime servers and toolsets were loaded
// (SyncServers, SyncToolsets).
func (a *API) Start() {
	if a.o.Bus == nil {
		return
	}
	var heard *state.Heard
	if a.o.Gateway != nil {
		heard = a.o.Gateway.BusHeard()
		// Before serving: until the follower first resynchronised,
		// what it keeps in step is re-read per use.
		heard.Track(followName)
		a.o.Gateway.SetServerCheck(a.checkServer)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	a.bg.Add(2)
	go func() {
		defer a.bg.Done()
		state.Follow(ctx, a.o.Bus, state.FollowOptions{
			Topics:  []string{TopicChanges, TopicApplied},
			What:    followName,
			Heard:   heard,
			Logger:  a.log,
			Timeout: busTimeout,
			Handle:  a.handleBus,
			Resync:  a.resync,
		})
	}()
	go func() {
		defer a.bg.Done()
		a.catchUp(ctx, heard)
	}()
}

// catchUp re-reads, every catchUpEvery while heard is not trusted, what
// an announcement missed meanwhile would have changed, until ctx ends.
func (a *API) catchUp(ctx context.Context, heard *state.Heard) {
	if heard == nil {
		return
	}
	t := time.NewTicker(catchUpEvery)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if heard.Trusted() {
			failing = false
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, busTimeout)
		if a.o.Vault != nil {
			a.o.Vault.ForgetAll()
		}
		err := errors.Join(a.SyncServers(cctx), a.SyncToolsets(cctx), a.ReloadGrants(cctx))
		cancel()
		if err != nil && !failing && ctx.Err() == nil {
			a.log.Warn("the bus is not heard and the store does not answer: toolsets and grants may be behind the other replicas' changes", "error", err)
		}
		failing = err != nil
	}
}

// checkServer is the gateway's ServerCheck: it brings the runtime server
// name in line with the store now (served as stored, or no longer), and
// fails when the store cannot be read.
func (a *API) checkServer(ctx context.Context, name string) error {
	o, err := a.o.Store.GetObject(ctx, store.KindServer, name)
	r := a.servers
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		if _, served := r.applied[name]; served {
			a.log.Info("runtime server removed on another replica, found while the bus is not heard", "server", name)
		}
		r.unloadLocked(a, name)
	case err != nil:
		return err
	default:
		r.loadLocked(ctx, a, o)
	}
	return nil
}

// Close stops following; the follower is gone when it returns.
func (a *API) Close() {
	if a.stop != nil {
		a.stop()
	}
	a.bg.Wait()
}

// handleBus handles one message of the admin bus: a change (applied,
// then confirmed when its announcer waits), or a confirmation of one of
// this API's changes.
func (a *API) handleBus(ctx context.Context, m state.Message) {
	if m.Topic == TopicApplied {
		if id, from, ok := strings.Cut(string(m.Data), " "); ok {
			a.confirms.Heard(id, from)
		}
		return
	}
	if id := a.applyChange(ctx, m); id != "" {
		a.confirmApplied(ctx, id)
	}
}

// applyChange applies one announcement of another replica, and returns
// its id when it is to be confirmed: this replica applied it (its own
// changes were applied when they were made). A change of a kind this
// version does not know is not confirmed: it is not applied here.
func (a *API) applyChange(ctx context.Context, m state.Message) (confirm string) {
	var c change
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Name == "" {
		a.log.Warn("ignoring an unreadable admin change announcement")
		return ""
	}
	if c.From == a.id {
		return c.ID // applied when it was made
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	switch c.Kind {
	case changeKey:
		a.keyChanged(c.Name)
	case changeServer:
		if !a.servers.apply(ctx, a, c.Name) {
			return "" // not applied: the announcer hears it
		}
	case changeToolset:
		if !a.toolsets.apply(ctx, a, c.Name) {
			return ""
		}
	case changeVault:
		if a.o.Vault != nil {
			a.o.Vault.Forget(c.Name)
		}
	case changeReload:
		a.followReload(c.Name)
	case changeIntegrity:
		a.integrityChanged(ctx, c.Name)
	case changeGrant:
		if err := a.ReloadGrants(ctx); err != nil {
			a.log.Warn("could not reload the grants after a change on another replica", "grant", c.Name, "error", err)
			return ""
		}
	default:
		// A newer replica's kind: its change takes effect here at the
		// next resync, or when this replica is upgraded.
		a.log.Debug("ignoring an admin change of an unknown kind", "kind", c.Kind)
		return ""
	}
	return c.ID
}

// resync re-reads everything another replica may have changed while this
// one was not listening: every cached key and vault entry, the runtime
// servers and toolsets, the grants.
func (a *API) resync(ctx context.Context) error {
	defer a.syncedOnce.Do(func() { close(a.synced) })
	if a.o.KeysFlushed != nil {
		a.o.KeysFlushed()
	}
	if a.o.Vault != nil {
		a.o.Vault.ForgetAll()
	}
	if a.o.Gateway != nil {
		a.o.Gateway.RecheckStreams()
		// A settled review missed: every server's lists are reviewed
		// again against the store's pins at their next read.
		if a.o.Integrity != nil {
			for _, name := range a.o.Gateway.ServerNames() {
				a.o.Integrity.Reload(name)
			}
		}
	}
	return errors.Join(a.SyncServers(ctx), a.SyncToolsets(ctx), a.ReloadGrants(ctx))
}

// followed is closed once the follower has subscribed and resynced: a
// change announced after that is applied here as it is heard.
func (a *API) followed() <-chan struct{} { return a.synced }

// keyChanged forgets the key alias on this replica and makes its open
// streams re-check it, so that a revocation ends them at once.
func (a *API) keyChanged(alias string) {
	if a.o.KeyChanged != nil {
		a.o.KeyChanged(alias)
	}
	if a.o.Gateway != nil {
		a.o.Gateway.RecheckStreams()
	}
}

// SyncServers makes the gateway serve the runtime servers the store
// holds: missing ones are added, changed ones replaced, deleted ones
// removed. A server the config file defines wins over a stored one of
// the same name. cmd/mcpgate calls it at start; the follower after a gap.
// A server that cannot be loaded is logged and skipped (retried at the
// next sync); the error is the store's.
func (a *API) SyncServers(ctx context.Context) error { return a.servers.sync(ctx, a) }

// SyncToolsets is SyncServers for runtime toolsets.
func (a *API) SyncToolsets(ctx context.Context) error { return a.toolsets.sync(ctx, a) }

// runtimeObjects keeps the gateway serving one kind of runtime object
// (servers, toolsets) as the store holds it. The config file's objects
// are not its business: a stored object of a name the file defines is
// ignored, and one the file defines is never removed.
type runtimeObjects struct {
	kind     string // store.KindServer, store.KindToolset
	fromFile func(name string) bool
	// load serves doc as name (replacing what is served under it);
	// unload stops serving name, false when it was not served.
	load   func(ctx context.Context, name string, doc json.RawMessage) error
	unload func(name string) bool

	// mu serialises changes, by handlers and the follower; applied is
	// each served object's document as the store held it.
	mu      sync.Mutex
	applied map[string]json.RawMessage
}

func (r *runtimeObjects) sync(ctx context.Context, a *API) error {
	objs, err := a.o.Store.ListObjects(ctx, r.kind)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	stored := make(map[string]bool, len(objs))
	for _, o := range objs {
		stored[o.Name] = true
	}
	// Removals first: a loaded object is validated with everything else
	// served, which must not include what the store no longer holds.
	for name := range r.applied {
		if !stored[name] {
			r.unloadLocked(a, name)
		}
	}
	for _, o := range objs {
		r.loadLocked(ctx, a, o)
	}
	return nil
}

// apply brings the object name in line with the store.
func (r *runtimeObjects) apply(ctx context.Context, a *API, name string) (read bool) {
	o, err := a.o.Store.GetObject(ctx, r.kind, name)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		r.unloadLocked(a, name)
	case err != nil:
		a.log.Warn("could not read an object another replica changed; retried at the next resync", "kind", r.kind, "name", name, "error", err)
		return false
	default:
		r.loadLocked(ctx, a, o)
	}
	return true
}

// loadLocked serves o unless it is served already as stored.
func (r *runtimeObjects) loadLocked(ctx context.Context, a *API, o store.Object) {
	if doc, ok := r.applied[o.Name]; ok && bytes.Equal(doc, o.Doc) {
		return
	}
	if r.fromFile(o.Name) {
		a.log.Warn("runtime object shadowed by the config file; ignored", "kind", r.kind, "name", o.Name)
		r.applied[o.Name] = o.Doc // warned once per version
		return
	}
	if err := r.load(ctx, o.Name, o.Doc); err != nil {
		a.log.Warn("runtime object not loaded", "kind", r.kind, "name", o.Name, "error", err)
		return
	}
	r.applied[o.Name] = o.Doc
}

// unloadLocked stops serving an object the store no longer holds.
func (r *runtimeObjects) unloadLocked(a *API, name string) {
	if _, ok := r.applied[name]; !ok {
		return
	}
	delete(r.applied, name)
	if !r.fromFile(name) && r.unload(name) {
		a.log.Info("runtime object removed on another replica", "kind", r.kind, "name", name)
	}
}
