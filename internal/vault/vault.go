// Package vault owns the per-person upstream credential vault (SPEC S19):
// each person's own credential for one upstream server, either OAuth
// tokens the gateway obtained for them or a static key they brought
// (BYOK), sealed at rest in the store's objects (kind vault) under the
// keys of the config's vault section; and the rules for using them
// concurrently: one refresh at a time per entry (across the fleet too,
// with ShareRefreshes: fleet.go), coalesced last-use
// writes, re-encryption under a new key (Rotate). Beside the people's
// entries it keeps the gateway's own client registrations at upstream
// authorization servers (registration.go), sealed and rotated the same way.
//
// It must not decide who may use a server (policy does), talk to an
// upstream or an identity provider (egress refreshes, through the
// function it hands Refresh), put a credential on a request, or share an
// entry across people: every entry is addressed by (person, server), and
// no call returns a credential for a server alone (List, which can
// filter by server, returns no secrets). No error, log value or String of
// an Entry carries a token.
//
// At rest, each entry is one object of kind vault:
//
//   - name: hex HMAC-SHA256(nameKey, len|person|len|server), where
//     nameKey is derived from the sealing key; a copy of the database
//     shows neither the person nor the server, and cannot confirm a guess.
//     The name depends on the key, so a lookup tries the name under each
//     configured key (the first one first) and Rotate renames as it
//     re-seals. (An unkeyed sha256(person, server) would be stable across
//     keys but lets anyone holding the database test guessed person ids.)
//   - document: {"v":1,"kid":ID,"nonce":B64,"ciphertext":B64}, the
//     ciphertext AES-256-GCM over the whole entry as JSON (person and
//     server included, so List can say whose it is) with the additional
//     data "mcpgate vault v1\x00"+name: a record copied onto another
//     entry's name does not decrypt.
//   - keys: each configured 32-byte key yields, through HKDF-SHA256 (no
//     salt, one info string per purpose), an encryption key and a naming
//     key, derived once in New.
//
// What a copy of the database does show: how many entries there are, the
// key id of each, and when each was created and last written (the
// store's own columns; Touch writes at most once a minute).
package vault

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Entry kinds.
const (
	// KindOAuth: tokens from an authorization-code flow the gateway ran
	// for the person; refreshed before Expiry.
	KindOAuth = "oauth"
	// KindStatic: a credential the person brought (an API key, a personal
	// access token); AccessToken holds it, Header optionally names the
	// header it goes in.
	KindStatic = "static"
)

// Entry is one person's credential for one server.
type Entry struct {
	Issuer string // the authorization server that issued the tokens (oauth)
	Person string // the person's user id (required)
	Server string // the upstream server's name (required)

	AccessToken  string // the credential; for static entries, the key
	RefreshToken string // oauth only; optional
	Expiry       time.Time
	Scopes       []string
	Kind         string // KindOAuth or KindStatic
	Header       string // static only: the header it goes in; "" means egress's default

	UpdatedAt time.Time // set by Put and Refresh
	LastUsed  time.Time // moved forward by Touch
}

// Meta is an entry without its secrets: what List returns and an
// administrator may see.
type Meta struct {
	Issuer, Person, Server string
	Kind, Header           string
	Scopes                 []string
	Expiry                 time.Time
	HasRefreshToken        bool
	UpdatedAt, LastUsed    time.Time
	KeyID                  string // the key the entry is sealed with
}

// Meta returns e without its secrets.
func (e Entry) Meta() Meta {
	return Meta{Issuer: e.Issuer, Person: e.Person, Server: e.Server, Kind: e.Kind, Header: e.Header,
		Scopes: slices.Clone(e.Scopes), Expiry: e.Expiry, HasRefreshToken: e.RefreshToken != "",
		UpdatedAt: e.UpdatedAt, LastUsed: e.LastUsed}
}

// String describes e without its secrets, so that a stray %v cannot log
// a token.
func (e Entry) String() string {
	return fmt.Sprintf("vault entry {person %q, server %q, kind %s, expiry %s, tokens redacted}", e.Person, e.Server, e.Kind, e.Expiry.Format(time.RFC3339))
}

// GoString is String, for %#v.
func (e Entry) GoString() string { return e.String() }

// LogValue logs e without its secrets.
func (e Entry) LogValue() slog.Value {
	return slog.GroupValue(slog.String("person", e.Person), slog.String("server", e.Server),
		slog.String("kind", e.Kind), slog.Time("expiry", e.Expiry))
}

// Filter selects entries for List; an empty field matches every value.
type Filter struct {
	Person, Server string
	// Servers, with Person set, are the only servers whose entries are
	// looked at: each is read by its name, and no other entry is
	// decrypted (without it List must open every entry to learn whose it
	// is). The person's entries for servers not listed are not returned.
	Servers []string
}

// Errors callers branch on (with errors.Is), beside ErrUnknownKey,
// ErrDecrypt and ErrCorrupt for records that cannot be read.
var (
	// ErrNotFound: the person has no credential stored for the server.
	ErrNotFound = errors.New("no credential stored")
	// ErrInvalid: the entry cannot be stored as given.
	ErrInvalid = errors.New("invalid vault entry")
)

// TouchInterval is how often Touch writes an entry's last use, at most.
const TouchInterval = time.Minute

// RefreshTimeout bounds one run of a Refresh function: it runs detached
// from the caller's cancellation (a caller that gives up must not abort
// a token exchange whose result the others need), so this is its bound.
const RefreshTimeout = time.Minute

// maxIDLen bounds a person id and a server name.
const maxIDLen = 512

// Vault is the credential vault. It is safe for concurrent use.
type Vault struct {
	objs store.Objects
	ring *ring
	now  func() time.Time

	mu      sync.Mutex
	locks   map[string]*entryLock // by memID, while held or awaited
	flights map[string]*flight    // refreshes running, by memID
	touched map[string]time.Time  // when Touch last wrote, by memID
	// opened keeps entries Get decrypted, by memID, for readTTL: egress
	// asks on every call, and a store read plus a decryption per call
	// would be paid by every person's every request. Writes and deletes
	// of this process drop an entry at once; gen keeps a read begun
	// before one from caching what it read.
	opened map[string]openedEntry
	gen    uint64
	// fleet, when set, makes refreshes single-flight across replicas
	// (fleet.go); holder is this process's name for its leases.
	fleet  FleetLock
	holder string
	// onChange hears every entry written or deleted here (OnChange).
	onChange func(ctx context.Context, id string, deleted bool)
}

// readTTL bounds how long an entry changed by another process (a fleet
// replica, `mcpgate vault rotate`) may be served as it was.
const (
	readTTL     = 5 * time.Second // as long as a key lookup is cached (callers.DefaultCacheTTL)
	readEntries = 10000
)

type openedEntry struct {
	e     Entry
	until time.Time
}

// forget drops an entry from the read cache; it must run after the store
// changed (and so after a read that began before the change).
func (v *Vault) forget(person, server string) {
	v.mu.Lock()
	v.gen++
	delete(v.opened, memID(person, server))
	v.mu.Unlock()
}

// entryLock serialises the writes of one entry in this process.
type entryLock struct {
	sem  chan struct{} // capacity 1: held when full
	refs int           // holders and waiters; guarded by Vault.mu
}

// flight is one refresh, shared by every caller that asked meanwhile.
type flight struct {
	done    chan struct{}
	waiters int // callers waiting, the first included; guarded by Vault.mu
	e       Entry
	err     error
}

// New returns a vault on objs sealing with keys[0] and opening with any
// of keys. now is the clock (nil: time.Now).
func New(objs store.Objects, keys []config.VaultKey, now func() time.Time) (*Vault, error) {
	r, err := newRing(keys)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Vault{objs: objs, ring: r, now: now,
		locks: map[string]*entryLock{}, flights: map[string]*flight{}, touched: map[string]time.Time{}, opened: map[string]openedEntry{}}, nil
}

// KeyID is the id of the key new and rotated entries are sealed with.
func (v *Vault) KeyID() string { return v.ring.primary().id }

// memID identifies an entry in this process's maps (never stored).
func memID(person, server string) string { return string(lengthPrefixed(person, server)) }

func checkIDs(person, server string) error {
	if person == registrationPerson {
		return fmt.Errorf("person %q is reserved: %w", person, ErrInvalid)
	}
	if err := checkID("person", person); err != nil {
		return err
	}
	return checkID("server", server)
}

func checkID(field, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s: %w", field, ErrInvalid)
	case len(s) > maxIDLen:
		return fmt.Errorf("%s longer than %d bytes: %w", field, maxIDLen, ErrInvalid)
	}
	return nil
}

func checkEntry(e Entry) error {
	if err := checkIDs(e.Person, e.Server); err != nil {
		return err
	}
	switch e.Kind {
	case KindOAuth:
		if e.AccessToken == "" && e.RefreshToken == "" {
			return fmt.Errorf("oauth entry without an access or refresh token: %w", ErrInvalid)
		}
		if e.Header != "" {
			return fmt.Errorf("header is for static entries only: %w", ErrInvalid)
		}
	case KindStatic:
		if e.AccessToken == "" {
			return fmt.Errorf("static entry without a credential: %w", ErrInvalid)
		}
		if e.RefreshToken != "" {
			return fmt.Errorf("static entry with a refresh token: %w", ErrInvalid)
		}
		if e.Header != "" && !validHeaderName(e.Header) {
			return fmt.Errorf("header %q is not an HTTP header name: %w", e.Header, ErrInvalid)
		}
	default:
		return fmt.Errorf("kind %q (want %s or %s): %w", e.Kind, KindOAuth, KindStatic, ErrInvalid)
	}
	// Credentials travel in headers, where control characters cannot.
	for _, s := range []string{e.AccessToken, e.RefreshToken} {
		if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return fmt.Errorf("credential contains a control character: %w", ErrInvalid)
		}
	}
	return nil
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// lock takes the entry's in-process write lock, waiting at most as long
// as ctx.
func (v *Vault) lock(ctx context.Context, id string) (func(), error) {
	v.mu.Lock()
	l := v.locks[id]
	if l == nil {
		l = &entryLock{sem: make(chan struct{}, 1)}
		v.locks[id] = l
	}
	l.refs++
	v.mu.Unlock()
	drop := func() {
		v.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(v.locks, id)
		}
		v.mu.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; drop() }, nil
	case <-ctx.Done():
		drop()
		return nil, ctx.Err()
	}
}

func toPlain(e Entry) plaintext {
	return plaintext{Issuer: e.Issuer, Person: e.Person, Server: e.Server, Kind: e.Kind,
		AccessToken: e.AccessToken, RefreshToken: e.RefreshToken, Expiry: utc(e.Expiry),
		Scopes: slices.Clone(e.Scopes), Header: e.Header, UpdatedAt: utc(e.UpdatedAt), LastUsed: utc(e.LastUsed)}
}

func fromPlain(p plaintext) Entry {
	return Entry{Issuer: p.Issuer, Person: p.Person, Server: p.Server, Kind: p.Kind,
		AccessToken: p.AccessToken, RefreshToken: p.RefreshToken, Expiry: utc(p.Expiry),
		Scopes: p.Scopes, Header: p.Header, UpdatedAt: utc(p.UpdatedAt), LastUsed: utc(p.LastUsed)}
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// Put stores e, replacing the person's entry for the server, and sets its
// UpdatedAt to now. LastUsed is stored as given.
func (v *Vault) Put(ctx context.Context, e Entry) error {
	if err := checkEntry(e); err != nil {
		return fmt.Errorf("vault put: %w", err)
	}
	unlock, err := v.lock(ctx, memID(e.Person, e.Server))
	if err != nil {
		return fmt.Errorf("vault put: %w", err)
	}
	defer unlock()
	e.UpdatedAt = v.now()
	if err := v.write(ctx, e); err != nil {
		return fmt.Errorf("vault put (server %q): %w", e.Server, err)
	}
	return nil
}

// write seals e under the primary key and removes the entry's names under
// the other keys. The caller holds the entry's lock.
func (v *Vault) write(ctx context.Context, e Entry) error { return v.writePlain(ctx, toPlain(e)) }

// writePlain is write for an entry as sealed (registrations included).
func (v *Vault) writePlain(ctx context.Context, p plaintext) error {
	name, doc, err := v.ring.seal(p)
	if err != nil {
		return err
	}
	_, err = v.objs.PutObject(ctx, store.KindVault, name, doc)
	v.forget(p.Person, p.Server) // even on error: the write may have landed
	v.changed(ctx, p.Person, p.Server, false)
	if err != nil {
		return err
	}
	for _, k := range v.ring.keys[1:] {
		if err := v.objs.DeleteObject(ctx, store.KindVault, k.name(p.Person, p.Server)); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Get returns the person's entry for the server, or ErrNotFound.
func (v *Vault) Get(ctx context.Context, person, server string) (Entry, error) {
	if err := checkIDs(person, server); err != nil {
		return Entry{}, fmt.Errorf("vault get: %w", err)
	}
	id, now := memID(person, server), v.now()
	v.mu.Lock()
	if o, ok := v.opened[id]; ok && now.Before(o.until) {
		v.mu.Unlock()
		return o.e.clone(), nil
	}
	gen := v.gen
	v.mu.Unlock()
	e, err := v.read(ctx, person, server)
	if err != nil {
		return Entry{}, fmt.Errorf("vault get (server %q): %w", server, err)
	}
	v.mu.Lock()
	if gen == v.gen {
		if len(v.opened) >= readEntries {
			clear(v.opened)
		}
		v.opened[id] = openedEntry{e: e.clone(), until: now.Add(readTTL)}
	}
	v.mu.Unlock()
	return e, nil
}

// clone copies e's slices, so that a cached entry cannot be changed
// through a returned one.
func (e Entry) clone() Entry {
	e.Scopes = append([]string(nil), e.Scopes...)
	return e
}

// read finds the entry under its name for each key, the primary's first.
func (v *Vault) read(ctx context.Context, person, server string) (Entry, error) {
	p, _, err := v.readPlain(ctx, person, server)
	if err != nil {
		return Entry{}, err
	}
	return fromPlain(p), nil
}

// Delete removes the person's entry for the server; ErrNotFound when
// there was none.
func (v *Vault) Delete(ctx context.Context, person, server string) error {
	if err := checkIDs(person, server); err != nil {
		return fmt.Errorf("vault delete: %w", err)
	}
	return v.delete(ctx, person, server)
}

func (v *Vault) delete(ctx context.Context, person, server string) error {
	id := memID(person, server)
	unlock, err := v.lock(ctx, id)
	if err != nil {
		return fmt.Errorf("vault delete: %w", err)
	}
	defer unlock()
	defer v.changed(ctx, person, server, true)
	defer v.forget(person, server) // after the deletes, whatever they did
	found := false
	for _, k := range v.ring.keys {
		err := v.objs.DeleteObject(ctx, store.KindVault, k.name(person, server))
		switch {
		case err == nil:
			found = true
		case !errors.Is(err, store.ErrNotFound):
			return fmt.Errorf("vault delete (server %q): %w", server, err)
		}
	}
	v.mu.Lock()
	delete(v.touched, id)
	v.mu.Unlock()
	if !found {
		return fmt.Errorf("vault delete (server %q): %w", server, ErrNotFound)
	}
	return nil
}

// List returns the entries f selects, without their secrets, ordered by
// person then server. Without Filter.Servers it decrypts every entry (the
// names do not say whose an entry is); one that cannot be read fails the
// call (naming its key id, never its content).
func (v *Vault) List(ctx context.Context, f Filter) ([]Meta, error) {
	if f.Person != "" && f.Servers != nil {
		return v.listByName(ctx, f)
	}
	objs, err := v.objs.ListObjects(ctx, store.KindVault)
	if err != nil {
		return nil, fmt.Errorf("vault list: %w", err)
	}
	seen := map[string]bool{}
	var out []Meta
	for _, o := range objs {
		p, kid, err := v.ring.open(o.Name, o.Doc)
		if err != nil {
			return nil, fmt.Errorf("vault list: entry %s: %w", o.Name, err)
		}
		if p.Kind == kindRegistration || (f.Person != "" && p.Person != f.Person) || (f.Server != "" && p.Server != f.Server) {
			continue
		}
		// An entry left under an older key's name beside its newer copy
		// (a write interrupted between its two steps) is listed once:
		// the primary copy sorts anywhere, so prefer it explicitly.
		id := memID(p.Person, p.Server)
		if seen[id] {
			if kid == v.KeyID() {
				for i := range out {
					if out[i].Person == p.Person && out[i].Server == p.Server {
						out[i] = withKey(fromPlain(p).Meta(), kid)
					}
				}
			}
			continue
		}
		seen[id] = true
		out = append(out, withKey(fromPlain(p).Meta(), kid))
	}
	slices.SortFunc(out, func(a, b Meta) int {
		if c := strings.Compare(a.Person, b.Person); c != 0 {
			return c
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out, nil
}

// listByName is List for one person and the given servers: each entry is
// read under its name (the primary key's first), as Get would.
func (v *Vault) listByName(ctx context.Context, f Filter) ([]Meta, error) {
	var out []Meta
	for _, server := range slices.Compact(slices.Sorted(slices.Values(f.Servers))) {
		if f.Server != "" && server != f.Server {
			continue
		}
		if err := checkIDs(f.Person, server); err != nil {
			return nil, fmt.Errorf("vault list: %w", err)
		}
		p, kid, err := v.readPlain(ctx, f.Person, server)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vault list (server %q): %w", server, err)
		}
		out = append(out, withKey(fromPlain(p).Meta(), kid))
	}
	return out, nil
}

// readPlain is read's entry as sealed, and the id of the key that
// sealed it.
func (v *Vault) readPlain(ctx context.Context, person, server string) (plaintext, string, error) {
	for _, k := range v.ring.keys {
		name := k.name(person, server)
		o, err := v.objs.GetObject(ctx, store.KindVault, name)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return plaintext{}, "", err
		}
		return v.ring.open(name, o.Doc)
	}
	return plaintext{}, "", ErrNotFound
}

func withKey(m Meta, kid string) Meta { m.KeyID = kid; return m }

// Touch records that the entry was used now. It writes at most once per
// TouchInterval per entry from this process, so LastUsed lags by up to
// that. ErrNotFound when there is no entry.
func (v *Vault) Touch(ctx context.Context, person, server string) error {
	if err := checkIDs(person, server); err != nil {
		return fmt.Errorf("vault touch: %w", err)
	}
	id, now := memID(person, server), v.now()
	v.mu.Lock()
	if last, ok := v.touched[id]; ok && now.Sub(last) < TouchInterval && !now.Before(last) {
		v.mu.Unlock()
		return nil
	}
	v.touched[id] = now
	if len(v.touched) > 4096 {
		for k, t := range v.touched {
			if now.Sub(t) >= TouchInterval {
				delete(v.touched, k)
			}
		}
	}
	v.mu.Unlock()
	err := v.touch(ctx, person, server, id, now)
	if err != nil {
		v.mu.Lock()
		delete(v.touched, id) // the next use tries again
		v.mu.Unlock()
		return fmt.Errorf("vault touch (server %q): %w", server, err)
	}
	return nil
}

func (v *Vault) touch(ctx context.Context, person, server, id string, now time.Time) error {
	unlock, err := v.lock(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	e, err := v.read(ctx, person, server)
	if err != nil {
		return err
	}
	if !now.After(e.LastUsed) {
		return nil
	}
	e.LastUsed = now
	return v.write(ctx, e)
}

// Refresh runs fn on the person's stored entry for the server and stores
// what it returns, at most one run at a time per entry in this process:
// callers that arrive while a run is under way wait for it and get its
// result instead of starting their own. Egress calls it before Expiry.
//
// fn gets the entry as stored when the run starts (read under the entry's
// lock, so it may find another caller already refreshed it and return it
// unchanged; an unchanged entry is not rewritten) and a context detached
// from the callers' cancellation, bounded by RefreshTimeout: a caller
// that gives up does not abort an exchange whose new refresh token the
// others need. fn must not change Person or Server. Its error is returned
// to every waiter as is (wrapped), and nothing is stored.
func (v *Vault) Refresh(ctx context.Context, person, server string, fn func(context.Context, Entry) (Entry, error)) (Entry, error) {
	if err := checkIDs(person, server); err != nil {
		return Entry{}, fmt.Errorf("vault refresh: %w", err)
	}
	id := memID(person, server)
	v.mu.Lock()
	f := v.flights[id]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		v.flights[id] = f
		go v.runFlight(context.WithoutCancel(ctx), f, id, person, server, fn)
	}
	f.waiters++
	v.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return Entry{}, fmt.Errorf("vault refresh (server %q): %w", server, f.err)
		}
		e := f.e
		e.Scopes = slices.Clone(e.Scopes) // each waiter its own
		return e, nil
	case <-ctx.Done():
		return Entry{}, ctx.Err()
	}
}

func (v *Vault) runFlight(ctx context.Context, f *flight, id, person, server string, fn func(context.Context, Entry) (Entry, error)) {
	ctx, cancel := context.WithTimeout(ctx, RefreshTimeout)
	defer cancel()
	f.e, f.err = v.refresh(ctx, id, person, server, fn)
	v.mu.Lock()
	delete(v.flights, id)
	v.mu.Unlock()
	close(f.done)
}

func (v *Vault) refresh(ctx context.Context, id, person, server string, fn func(context.Context, Entry) (Entry, error)) (e Entry, err error) {
	unlock, err := v.lock(ctx, id)
	if err != nil {
		return Entry{}, err
	}
	defer unlock()
	// Then the fleet's: the entry is read below, under both, so a refresh
	// another replica finished meanwhile is what fn gets.
	release, err := v.fleetLock(ctx, id)
	if err != nil {
		return Entry{}, err
	}
	defer release()
	cur, err := v.read(ctx, person, server)
	if err != nil {
		return Entry{}, err
	}
	next, err := callRefresh(ctx, fn, cur)
	if err != nil {
		return Entry{}, err
	}
	if next.Person != person || next.Server != server {
		return Entry{}, fmt.Errorf("the refresh function changed the entry's person or server: %w", ErrInvalid)
	}
	if sameEntry(cur, next) {
		return cur, nil
	}
	if err := checkEntry(next); err != nil {
		return Entry{}, err
	}
	next.UpdatedAt = v.now()
	if err := v.write(ctx, next); err != nil {
		return Entry{}, err
	}
	return fromPlain(toPlain(next)), nil // as Get would return it
}

// callRefresh runs fn, turning a panic into an error so that the waiters
// are released.
func callRefresh(ctx context.Context, fn func(context.Context, Entry) (Entry, error), cur Entry) (e Entry, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the refresh function panicked: %v", r)
		}
	}()
	return fn(ctx, cur)
}

func sameEntry(a, b Entry) bool {
	return a.Issuer == b.Issuer && a.Person == b.Person && a.Server == b.Server && a.Kind == b.Kind &&
		a.AccessToken == b.AccessToken && a.RefreshToken == b.RefreshToken && a.Expiry.Equal(b.Expiry) &&
		slices.Equal(a.Scopes, b.Scopes) && a.Header == b.Header && a.UpdatedAt.Equal(b.UpdatedAt) && a.LastUsed.Equal(b.LastUsed)
}

// Rotate re-seals every entry not sealed with the first key under it (and
// under its name for that key), and returns how many it re-sealed. An
// entry that cannot be opened (its key is no longer configured, or it
// does not decrypt) is left as it is and reported in the joined error;
// the others are still rotated. Once it returns without error, the other
// keys can be removed from the config.
//
// Within this process Rotate is serialised with every other write of the
// same entry. Against another process (mcpgate vault rotate beside a
// running gateway) a write of the same entry that lands between Rotate's
// read and its write can be lost: the store has no compare-and-swap.
// Rotate narrows the window by re-reading each record just before
// re-sealing it; rotating with the gateway stopped closes it.
func (v *Vault) Rotate(ctx context.Context) (n int, err error) {
	objs, err := v.objs.ListObjects(ctx, store.KindVault)
	if err != nil {
		return 0, fmt.Errorf("vault rotate: %w", err)
	}
	primary := v.ring.primary()
	var errs []error
	for _, o := range objs {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		rec, err := decodeRecord(o.Doc)
		if err == nil && rec.KID == primary.id {
			continue // already under the first key, and so under its name
		}
		done, err := v.rotateOne(ctx, o)
		if err != nil {
			errs = append(errs, fmt.Errorf("vault rotate: entry %s: %w", o.Name, err))
			continue
		}
		if done {
			n++
		}
	}
	return n, errors.Join(errs...)
}

// rotateOne re-seals the object o under the primary key; done reports
// whether it wrote.
func (v *Vault) rotateOne(ctx context.Context, o store.Object) (done bool, err error) {
	p, _, err := v.ring.open(o.Name, o.Doc)
	if err != nil {
		return false, err
	}
	unlock, err := v.lock(ctx, memID(p.Person, p.Server))
	if err != nil {
		return false, err
	}
	defer unlock()
	// Re-read: the entry may have changed since the listing.
	cur, err := v.objs.GetObject(ctx, store.KindVault, o.Name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil // deleted, or already moved by a write
	}
	if err != nil {
		return false, err
	}
	if cur.Version != o.Version {
		if p, _, err = v.ring.open(o.Name, cur.Doc); err != nil {
			return false, err
		}
		if rec, _ := decodeRecord(cur.Doc); rec.KID == v.KeyID() {
			return false, nil
		}
	}
	primaryName := v.ring.primary().name(p.Person, p.Server)
	// A copy under the first key's name is the newer one (a write puts
	// it there before removing the old names): keep it, drop this one.
	if primaryName != o.Name {
		if _, err := v.objs.GetObject(ctx, store.KindVault, primaryName); err == nil {
			if err := v.objs.DeleteObject(ctx, store.KindVault, o.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
				return false, err
			}
			return false, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
	}
	if err := v.writePlain(ctx, p); err != nil {
		return false, err
	}
	return true, nil
}
