package admin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"time"

	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Admin changes across a fleet (SPEC S15, issue 14 §3). Every replica
// serves from what it holds in memory: the authenticator's key cache,
// the gateway's servers, the grant set. A change made through one
// replica's API is committed to the store first, then announced on the
// bus (Options.Bus), and every other replica applies it within a second:
//
//	handler: store write -> apply here -> announce(kind, name)
//	follower (every replica): message -> re-read that object from the
//	  store -> apply; gap (Lost, new subscription) -> resync everything
//
// A message names what changed, never how: the follower re-reads the
// store, so a message cannot carry a stale or forged value, and two
// replicas changing one object at once both end with what the store
// holds. A message never carries a secret (keys are named by alias).
// Delivery is at most once; publishing failures are logged and never fail
// the request (the change is committed, and the others converge at their
// next resync).

// TopicChanges is the bus topic of admin changes.
const TopicChanges = "gateway:admin"

// busTimeout bounds one publish and one resync.
const busTimeout = 2 * time.Second

// What a change names (change.Kind).
const (
	changeKey    = "key"    // Name: the key's alias
	changeServer = "server" // Name: a runtime server
	changeGrant  = "grant"  // Name: "<user|team|role>:<value>"
)

// change is one message on TopicChanges.
type change struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// From is the announcing API (API.id): its own follower skips it.
	From string `json:"from"`
}

// newInstanceID names this API in its announcements.
func newInstanceID() string { return rand.Text()[:16] }

// announce tells the other replicas that kind name changed.
func (a *API) announce(ctx context.Context, kind, name string) {
	if a.o.Bus == nil {
		return
	}
	msg, _ := json.Marshal(change{Kind: kind, Name: name, From: a.id})
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), busTimeout)
	defer cancel()
	if err := a.o.Bus.Publish(ctx, TopicChanges, msg); err != nil {
		a.log.Warn("could not announce an admin change to the other replicas; they apply it at their next resync",
			"kind", kind, "name", name, "error", err)
	}
}

// Start follows the other replicas' changes, when there is a bus, until
// Close. Call it once, after the runtime servers were loaded
// (SyncServers).
func (a *API) Start() {
	if a.o.Bus == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		state.Follow(ctx, a.o.Bus, state.FollowOptions{
			Topics:  []string{TopicChanges},
			What:    "admin changes",
			Logger:  a.log,
			Timeout: busTimeout,
			Handle:  a.applyChange,
			Resync:  a.resync,
		})
	}()
}

// Close stops following; the follower is gone when it returns.
func (a *API) Close() {
	if a.stop != nil {
		a.stop()
	}
	a.bg.Wait()
}

// applyChange applies one announcement of another replica.
func (a *API) applyChange(ctx context.Context, m state.Message) {
	var c change
	if err := json.Unmarshal(m.Data, &c); err != nil || c.Name == "" {
		a.log.Warn("ignoring an unreadable admin change announcement")
		return
	}
	if c.From == a.id {
		return // applied when it was made
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	switch c.Kind {
	case changeKey:
		a.keyChanged(c.Name)
	case changeServer:
		a.applyServer(ctx, c.Name)
	case changeGrant:
		if err := a.ReloadGrants(ctx); err != nil {
			a.log.Warn("could not reload the grants after a change on another replica", "grant", c.Name, "error", err)
		}
	default:
		// A newer replica's kind: its change takes effect here at the
		// next resync, or when this replica is upgraded.
		a.log.Debug("ignoring an admin change of an unknown kind", "kind", c.Kind)
	}
}

// resync re-reads everything another replica may have changed while this
// one was not listening: every cached key, the runtime servers, the
// grants.
func (a *API) resync(ctx context.Context) {
	defer a.synced.Store(true)
	if a.o.KeysFlushed != nil {
		a.o.KeysFlushed()
	}
	if a.o.Gateway != nil {
		a.o.Gateway.RecheckStreams()
	}
	err := errors.Join(a.SyncServers(ctx), a.ReloadGrants(ctx))
	if err != nil {
		a.log.Warn("admin resync with the store incomplete; retried at the next gap", "error", err)
	}
}

// following reports whether the follower has subscribed (and resynced)
// at least once.
func (a *API) following() bool { return a.synced.Load() }

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
func (a *API) SyncServers(ctx context.Context) error {
	objs, err := a.o.Store.ListObjects(ctx, store.KindServer)
	if err != nil {
		return err
	}
	a.serversMu.Lock()
	defer a.serversMu.Unlock()
	stored := make(map[string]bool, len(objs))
	for _, o := range objs {
		stored[o.Name] = true
		a.loadServer(ctx, o)
	}
	for name := range a.applied {
		if !stored[name] {
			a.unloadServer(name)
		}
	}
	return nil
}

// applyServer brings one runtime server in line with the store.
func (a *API) applyServer(ctx context.Context, name string) {
	o, err := a.o.Store.GetObject(ctx, store.KindServer, name)
	a.serversMu.Lock()
	defer a.serversMu.Unlock()
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.unloadServer(name)
	case err != nil:
		a.log.Warn("could not read a server another replica changed; retried at the next resync", "server", name, "error", err)
	default:
		a.loadServer(ctx, o)
	}
}

// loadServer serves o unless it is served already as stored. Called with
// serversMu held.
func (a *API) loadServer(ctx context.Context, o store.Object) {
	if doc, ok := a.applied[o.Name]; ok && bytes.Equal(doc, o.Doc) {
		return
	}
	if a.fromFile(o.Name) {
		a.log.Warn("runtime server shadowed by the config file; ignored", "server", o.Name)
		a.applied[o.Name] = o.Doc // warned once per version
		return
	}
	dir := ""
	if a.o.Config != nil {
		dir = a.o.Config.Dir
	}
	srv, err := ParseServer(o.Name, o.Doc, dir)
	if err == nil {
		err = a.o.Gateway.AddServer(ctx, o.Name, srv, a.fromFile)
	}
	if err != nil {
		a.log.Warn("runtime server not loaded", "server", o.Name, "error", err)
		return
	}
	a.applied[o.Name] = o.Doc
}

// unloadServer stops serving a runtime server the store no longer holds.
// Called with serversMu held.
func (a *API) unloadServer(name string) {
	if _, ok := a.applied[name]; !ok {
		return
	}
	delete(a.applied, name)
	if !a.fromFile(name) && a.o.Gateway.RemoveServer(name) {
		a.log.Info("runtime server removed on another replica", "server", name)
	}
}
