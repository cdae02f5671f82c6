package integrity

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/store"
)

// Audit actions of integrity events (Event.Action).
const (
	ActionChanged  = "integrity.changed"  // a pinned definition changed
	ActionAdded    = "integrity.added"    // a definition appeared after first sight
	ActionHeld     = "integrity.held"     // first sight held (approve: manual, or a quarantine finding)
	ActionFinding  = "integrity.finding"  // first sight pinned, with warnings
	ActionReverted = "integrity.reverted" // the server went back to the approved definition
	ActionApproved = "integrity.approved"
	ActionRejected = "integrity.rejected"
)

// ActorGateway is the audit actor of what the gateway itself detected.
const ActorGateway = "mcpgate"

// approvedFirstSight is Pin.ApprovedBy of a definition pinned on first
// sight.
const approvedFirstSight = "first-sight"

// Policy is what the configuration says of one server.
type Policy struct {
	Mode    string // ModePin, ModeWarn or ModeOff
	Approve string // ApproveAuto or ApproveManual
	// Hosts are the server's own host names (foreign_url).
	Hosts []string
	// Source and Version: where the server came from, when known
	// (provenance kept with its pins).
	Source, Version string
}

// Event is one integrity change, for the audit log, the exporters and
// the metric.
type Event struct {
	Action string    `json:"action"`
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`
	Server string    `json:"server"`
	Kind   string    `json:"kind"`
	Name   string    `json:"name"`
	Mode   string    `json:"mode,omitempty"`
	// Held: the definition is not served (hidden, its calls refused).
	Held bool `json:"held"`
	// Old and New are fingerprints ("" for none).
	Old      string    `json:"old_fingerprint,omitempty"`
	New      string    `json:"new_fingerprint,omitempty"`
	Diff     string    `json:"diff,omitempty"`
	Findings []Finding `json:"findings,omitempty"`
}

// Options wires a Keeper.
type Options struct {
	// Store keeps the pins; nil keeps them in this process only.
	Store store.Pins
	// Scanner checks new and changed definitions; nil: the built-in rules.
	Scanner *Scanner
	// Record receives every event (the audit log, the exporters); nil
	// records nothing. It must not block for long: it is called with the
	// review of a list in progress.
	Record func(ctx context.Context, e Event)
	// Separator joins server and tool names in the merged catalog
	// (shadowing checks the prefixed names too).
	Separator string
	Logger    *slog.Logger
	Now       func() time.Time
}

// Keeper owns the pins of every server and decides, for each list an
// upstream sends, which definitions are served (catalog.Reviewer). It is
// safe for concurrent use; mu serialises reviews and settlements, which
// are rare (a list fetch, an administrator's click), so holding it across
// a store call costs nothing on the request path. Held, which is on the
// path of a refused call only, takes it too.
type Keeper struct {
	o Options

	// policy and released are set by Attach (the gateway), once, before
	// the first review.
	policy   func(server string) Policy
	released func(server string)

	mu sync.Mutex // guards the fields below
	// held: server -> kind -> names not served.
	held map[string]map[string]map[string]bool
	// cache: the last pins read or written per server, for a store that
	// does not answer (and the only copy without a store).
	cache map[string][]store.Pin
	// names: server -> its tool names, for shadowing; loaded from the
	// store's pins once.
	names       map[string][]string
	namesLoaded bool
}

var _ catalog.Reviewer = (*Keeper)(nil)

// New returns a Keeper; Attach it before use.
func New(o Options) *Keeper {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Scanner == nil {
		o.Scanner, _ = NewScanner(nil)
	}
	if o.Separator == "" {
		o.Separator = "__"
	}
	return &Keeper{
		o:        o,
		policy:   func(string) Policy { return Policy{Mode: ModeWarn, Approve: ApproveAuto} },
		released: func(string) {},
		held:     map[string]map[string]map[string]bool{},
		cache:    map[string][]store.Pin{},
		names:    map[string][]string{},
	}
}

// Attach tells the keeper each server's policy and how to make a server's
// lists be read again after a settlement (the gateway drops its cached
// lists and tells its clients they changed). Call it once, before the
// first review.
func (k *Keeper) Attach(policy func(server string) Policy, released func(server string)) {
	k.policy, k.released = policy, released
}

// SetScanner replaces the scanner (a reload changed integrity.patterns);
// definitions already pinned are not scanned again until they change.
func (k *Keeper) SetScanner(s *Scanner) {
	k.mu.Lock()
	k.o.Scanner = s
	k.mu.Unlock()
}

// PinKind is the pin kind of a catalog kind; "" for resources, which are
// not pinned (their contents are data, read on request).
func PinKind(c catalog.Kind) string {
	switch c {
	case catalog.Tools:
		return store.PinTool
	case catalog.Prompts:
		return store.PinPrompt
	case catalog.Templates:
		return store.PinTemplate
	}
	return ""
}

// Held reports whether server's definition of kind named name is held
// (awaiting review, or rejected) as of the last review of its list.
func (k *Keeper) Held(server, kind, name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[server][kind][name]
}

// Review is the catalog's hook: it returns the items of a list just
// fetched that may be served, pins what first sight approves, records
// what changed, and remembers what it held.
func (k *Keeper) Review(ctx context.Context, server string, ck catalog.Kind, items []catalog.Item) []catalog.Item {
	kind := PinKind(ck)
	if kind == "" {
		return items
	}
	pol := k.policy(server)
	k.mu.Lock()
	defer k.mu.Unlock()
	if pol.Mode == ModeOff {
		delete(k.heldKinds(server), kind)
		return items
	}
	if kind == store.PinTool {
		k.loadNamesLocked(ctx)
		names := make([]string, len(items))
		for i, it := range items {
			names[i] = it.Key
		}
		k.names[server] = names
	}
	pins, ok := k.readLocked(ctx, server)
	byName := map[string]store.Pin{}
	for _, p := range pins {
		if p.Kind == kind {
			byName[p.Name] = p
		}
	}
	first := ok && len(byName) == 0
	now := k.o.Now().UTC().Truncate(time.Millisecond)
	var writes []store.Pin
	var events []Event
	held := map[string]bool{}
	out := make([]catalog.Item, 0, len(items))
	var sc *Context
	for _, it := range items {
		canon, err := Canonical(kind, it.Raw)
		if err != nil {
			// The catalog checked it is an object with a name; a
			// definition that cannot be fingerprinted is not served in
			// pin mode.
			if pol.Mode == ModePin {
				held[it.Key] = true
				continue
			}
			out = append(out, it)
			continue
		}
		fp := Fingerprint(canon)
		p, known := byName[it.Key]
		switch {
		case !ok:
			// The store did not answer and nothing is cached: fail
			// closed in pin mode, open in warn mode, changing nothing.
			if pol.Mode == ModePin {
				held[it.Key] = true
			} else {
				out = append(out, it)
			}
			continue
		case known && fp == p.Fingerprint:
			if p.Pending != "" {
				events = append(events, Event{Action: ActionReverted, Name: it.Key, Old: p.Pending, New: fp})
				p.Pending, p.PendingDefinition, p.Findings, p.UpdatedAt = "", nil, nil, now
				writes = append(writes, p)
			}
		case known && (fp == p.Pending || fp == p.Rejected):
			// Seen before: already recorded and reported.
		default:
			if sc == nil {
				c := k.contextLocked(server, pol)
				sc = &c
			}
			findings := k.o.Scanner.Scan(canon, *sc)
			fj, _ := json.Marshal(findings)
			if len(findings) == 0 {
				fj = nil
			}
			e := Event{Name: it.Key, New: fp, Findings: findings}
			if !known {
				p = store.Pin{Server: server, Kind: kind, Name: it.Key, Source: pol.Source, Version: pol.Version, SeenAt: now}
				if first && pol.Approve != ApproveManual && !Quarantines(findings) {
					p.Fingerprint, p.Definition, p.ApprovedBy, p.Findings = fp, canon, approvedFirstSight, fj
					if len(findings) > 0 {
						e.Action = ActionFinding
						events = append(events, e)
					}
				} else {
					p.Pending, p.PendingDefinition, p.Findings = fp, canon, fj
					e.Action, e.Diff = ActionAdded, Diff("", Pretty(canon))
					if first {
						e.Action = ActionHeld
					}
					events = append(events, e)
				}
			} else {
				old := p.Definition
				if p.Fingerprint == "" {
					old = p.PendingDefinition
				}
				e.Action, e.Old, e.Diff = ActionChanged, p.Fingerprint, Diff(Pretty(old), Pretty(canon))
				p.Pending, p.PendingDefinition, p.Findings, p.SeenAt = fp, canon, fj, now
				events = append(events, e)
			}
			if pol.Source != "" || pol.Version != "" {
				// Provenance as configured when this definition was seen:
				// an upgraded package shows beside the change it brought.
				p.Source, p.Version = pol.Source, pol.Version
			}
			p.UpdatedAt = now
			writes = append(writes, p)
		}
		byName[it.Key] = p
		if holds(pol, p, fp) {
			held[it.Key] = true
			continue
		}
		out = append(out, it)
	}
	if len(writes) > 0 {
		if k.o.Store != nil {
			if err := k.o.Store.PutPins(ctx, writes); err != nil {
				k.o.Logger.Warn("integrity: could not store the pins; the change is reported again at the next review", "server", server, "error", err)
			}
		}
		k.cache[server] = mergePins(pins, writes)
	}
	k.heldKinds(server)[kind] = held
	for _, e := range events {
		e.Time, e.Actor, e.Server, e.Kind, e.Mode = now, ActorGateway, server, kind, pol.Mode
		e.Held = held[e.Name]
		k.emit(ctx, e)
	}
	return out
}

// holds decides whether the definition with fingerprint fp is held.
func holds(pol Policy, p store.Pin, fp string) bool {
	switch {
	case fp == p.Fingerprint:
		return false
	case fp == p.Rejected && fp != p.Pending:
		return true
	case fp == p.Pending:
		return pol.Mode == ModePin || p.Fingerprint == "" && pol.Approve == ApproveManual || quarantined(p.Findings)
	}
	return pol.Mode == ModePin
}

func quarantined(findings json.RawMessage) bool {
	if len(findings) == 0 {
		return false
	}
	var fs []Finding
	if json.Unmarshal(findings, &fs) != nil {
		return true
	}
	return Quarantines(fs)
}

func (k *Keeper) heldKinds(server string) map[string]map[string]bool {
	m := k.held[server]
	if m == nil {
		m = map[string]map[string]bool{}
		k.held[server] = m
	}
	return m
}

func (k *Keeper) emit(ctx context.Context, e Event) {
	k.o.Logger.Info("tool integrity", "action", e.Action, "server", e.Server, "kind", e.Kind, "name", e.Name, "held", e.Held, "findings", len(e.Findings))
	if k.o.Record != nil {
		k.o.Record(ctx, e)
	}
}

// readLocked reads server's pins from the store, falling back on the
// last ones read; ok is false when there are none to go by.
func (k *Keeper) readLocked(ctx context.Context, server string) ([]store.Pin, bool) {
	if k.o.Store == nil {
		return k.cache[server], true
	}
	pins, err := k.o.Store.ListPins(ctx, server)
	if err != nil {
		cached, ok := k.cache[server]
		k.o.Logger.Warn("integrity: could not read the pins; deciding from the last ones read", "server", server, "have_cached", ok, "error", err)
		return cached, ok
	}
	k.cache[server] = pins
	return pins, true
}

// loadNamesLocked reads the tool names of every pinned server once, so
// that shadowing is found against servers not listed yet since start.
func (k *Keeper) loadNamesLocked(ctx context.Context) {
	if k.namesLoaded || k.o.Store == nil {
		k.namesLoaded = true
		return
	}
	pins, err := k.o.Store.ListPins(ctx, "")
	if err != nil {
		return // tried again at the next review
	}
	k.namesLoaded = true
	for _, p := range pins {
		if p.Kind == store.PinTool {
			if _, listed := k.names[p.Server]; !listed || !slices.Contains(k.names[p.Server], p.Name) {
				k.names[p.Server] = append(k.names[p.Server], p.Name)
			}
		}
	}
}

// contextLocked is the scan context of server: its hosts and the other
// servers' tool names.
func (k *Keeper) contextLocked(server string, pol Policy) Context {
	others := map[string]string{}
	for s, names := range k.names {
		if s == server {
			continue
		}
		for _, n := range names {
			if Distinctive(n) {
				others[n] = s
			}
			others[s+k.o.Separator+n] = s
		}
	}
	return Context{Server: server, Hosts: pol.Hosts, Others: others}
}

func mergePins(pins, writes []store.Pin) []store.Pin {
	out := slices.Clone(pins)
	for _, w := range writes {
		i := slices.IndexFunc(out, func(p store.Pin) bool { return p.Kind == w.Kind && p.Name == w.Name })
		if i >= 0 {
			out[i] = w
		} else {
			out = append(out, w)
		}
	}
	return out
}

// Change is one definition awaiting review, as GET /admin/v1/integrity
// shows it.
type Change struct {
	Server string `json:"server"`
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	// Status: "changed" (an approved definition changed) or "new" (never
	// approved: held on first sight, or added later).
	Status string `json:"status"`
	Mode   string `json:"mode"`
	// Held: hidden from every list and its calls refused.
	Held bool `json:"held"`
	// Old and New are the definitions, indented; Diff the line diff.
	Old      string    `json:"old"`
	New      string    `json:"new"`
	Diff     string    `json:"diff"`
	Findings []Finding `json:"findings"`
	OldFP    string    `json:"old_fingerprint,omitempty"`
	NewFP    string    `json:"new_fingerprint"`
	SeenAt   time.Time `json:"seen_at"`
	Source   string    `json:"source,omitempty"`
	Version  string    `json:"version,omitempty"`
}

// Pending lists the definitions awaiting review, of server or ("") of
// every server, ordered by server, kind and name.
func (k *Keeper) Pending(ctx context.Context, server string) ([]Change, error) {
	pins, err := k.list(ctx, server)
	if err != nil {
		return nil, err
	}
	out := []Change{}
	for _, p := range pins {
		if p.Pending == "" {
			continue
		}
		pol := k.policy(p.Server)
		c := Change{Server: p.Server, Kind: p.Kind, Name: p.Name, Status: "changed", Mode: pol.Mode,
			Held: pol.Mode != ModeOff && holds(pol, p, p.Pending), Old: Pretty(p.Definition), New: Pretty(p.PendingDefinition),
			OldFP: p.Fingerprint, NewFP: p.Pending, SeenAt: p.SeenAt, Source: p.Source, Version: p.Version, Findings: []Finding{}}
		if p.Fingerprint == "" {
			c.Status = "new"
		}
		c.Diff = Diff(c.Old, c.New)
		if len(p.Findings) > 0 {
			_ = json.Unmarshal(p.Findings, &c.Findings)
		}
		out = append(out, c)
	}
	return out, nil
}

func (k *Keeper) list(ctx context.Context, server string) ([]store.Pin, error) {
	if k.o.Store != nil {
		return k.o.Store.ListPins(ctx, server)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if server != "" {
		return slices.Clone(k.cache[server]), nil
	}
	var out []store.Pin
	for _, s := range slices.Sorted(maps.Keys(k.cache)) {
		out = append(out, k.cache[s]...)
	}
	return out, nil
}

// ErrNothingPending: none of the named definitions awaits review.
var ErrNothingPending = errors.New("nothing awaits review")

// Approve makes the pending definitions of server (all, or those named)
// the approved ones; by names the administrator. It returns the names
// settled and those named that await nothing.
func (k *Keeper) Approve(ctx context.Context, server string, names []string, by string) (done, missing []string, err error) {
	return k.settle(ctx, server, names, by, true)
}

// Reject refuses the pending definitions of server (all, or those
// named): they stay held while the server offers them; the approved
// definition, if any, is served again when the server goes back to it.
func (k *Keeper) Reject(ctx context.Context, server string, names []string, by string) (done, missing []string, err error) {
	return k.settle(ctx, server, names, by, false)
}

func (k *Keeper) settle(ctx context.Context, server string, names []string, by string, approve bool) (done, missing []string, err error) {
	k.mu.Lock()
	var pins []store.Pin
	if k.o.Store != nil {
		pins, err = k.o.Store.ListPins(ctx, server)
		if err != nil {
			k.mu.Unlock()
			return nil, nil, err
		}
	} else {
		pins = slices.Clone(k.cache[server])
	}
	want, found := map[string]bool{}, map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	now := k.o.Now().UTC().Truncate(time.Millisecond)
	pol := k.policy(server)
	var writes []store.Pin
	var events []Event
	for _, p := range pins {
		if p.Pending == "" || len(want) > 0 && !want[p.Name] {
			continue
		}
		found[p.Name] = true
		e := Event{Time: now, Actor: by, Server: server, Kind: p.Kind, Name: p.Name, Mode: pol.Mode, Old: p.Fingerprint, New: p.Pending}
		if approve {
			e.Action, e.Diff = ActionApproved, Diff(Pretty(p.Definition), Pretty(p.PendingDefinition))
			p.Fingerprint, p.Definition, p.Rejected, p.ApprovedBy = p.Pending, p.PendingDefinition, "", by
		} else {
			e.Action, e.Held = ActionRejected, true
			p.Rejected = p.Pending
		}
		p.Pending, p.PendingDefinition, p.UpdatedAt = "", nil, now
		if approve {
			p.Findings = nil
		}
		writes = append(writes, p)
		events = append(events, e)
		done = append(done, p.Name)
	}
	for _, n := range names {
		if !found[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	if len(writes) > 0 {
		if k.o.Store != nil {
			if err := k.o.Store.PutPins(ctx, writes); err != nil {
				k.mu.Unlock()
				return nil, nil, err
			}
		}
		k.cache[server] = mergePins(pins, writes)
	}
	k.mu.Unlock()
	for _, e := range events {
		k.emit(ctx, e)
	}
	if len(writes) > 0 {
		k.released(server)
	}
	if len(done) == 0 && len(missing) == 0 {
		return nil, nil, ErrNothingPending
	}
	return done, missing, nil
}

// Reload makes server's lists be read again, so that what another
// replica settled (the store says) is served here: the bus follower
// calls it.
func (k *Keeper) Reload(server string) {
	k.released(server)
}
