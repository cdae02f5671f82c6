package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcpgate/mcpgate/internal/state"
)

// SessionInfo describes one downstream session for operators (S13.1).
// It never carries the full session id.
type SessionInfo struct {
	IDPrefix      string   `json:"id_prefix"`
	ClientName    string   `json:"client_name,omitempty"`
	ClientVersion string   `json:"client_version,omitempty"`
	User          string   `json:"user,omitempty"`
	KeyAlias      string   `json:"key_alias,omitempty"`
	Team          string   `json:"team,omitempty"`
	ClientIP      string   `json:"client_ip,omitempty"`
	Route         string   `json:"route"`
	Servers       []string `json:"servers"`
	Created       string   `json:"created"`
	// IdleSeconds is how long since the session was last used: on this
	// replica when it holds a copy, else on the replica that used it last
	// (up to sessionSeenEvery behind, fleet mode).
	IdleSeconds float64 `json:"idle_seconds"`
	// InFlight and UpstreamSessions are this replica's copy's: 0 for a
	// session it does not hold.
	InFlight int `json:"in_flight"`
	// UpstreamSessions counts the upstream sessions the session's calls
	// use: the live upstream sessions of its servers.
	UpstreamSessions int `json:"upstream_sessions"`
	// Replicas, in fleet mode, are the live replicas holding a copy of
	// the session (their instance ids): each serves its requests that
	// reach it. Empty: none holds one now (the one that did stopped), and
	// any replica resumes it at its client's next request.
	Replicas []string `json:"replicas,omitzero"`
}

// Count is one row of a breakdown.
type Count struct {
	Label string `json:"label"`
	Count int    `json:"count"`
}

// SessionsReport is GET /admin/v1/sessions (S13.1): a contract.
type SessionsReport struct {
	Instance string        `json:"instance"`
	Total    int           `json:"total"`
	ByClient []Count       `json:"by_client"`
	ByUser   []Count       `json:"by_user"`
	Sessions []SessionInfo `json:"sessions"`
	// Replicas, in fleet mode, are the live replicas whose sessions the
	// report covers (this one included).
	Replicas []string `json:"replicas,omitzero"`
	// Incomplete says why the report may miss sessions of other replicas
	// (fleet mode: the shared state did not answer, or holds more than a
	// report lists); "" when it has every one.
	Incomplete string `json:"incomplete,omitempty"`
}

// TerminateResult is POST /admin/v1/sessions/terminate (S13.2).
type TerminateResult struct {
	Terminated int           `json:"terminated"`
	Sessions   []SessionInfo `json:"sessions"`
	// Unconfirmed counts the ended sessions whose end some other
	// replica did not confirm in time (fanout.go): until it hears of it
	// or resynchronises, that replica may still serve them.
	Unconfirmed int `json:"unconfirmed,omitempty"`
}

// idPrefixLen is how much of a session id operators see.
const idPrefixLen = 8

func (g *Gateway) infoOf(s *session, now time.Time) SessionInfo {
	name, version := s.Client()
	health := g.up.Health()
	up := 0
	for _, srv := range s.route.servers {
		up += health[srv].Sessions
	}
	path := s.route.path
	if path == "" {
		path = "/mcp"
	}
	return SessionInfo{
		IDPrefix:         s.ID()[:idPrefixLen],
		ClientName:       name,
		ClientVersion:    version,
		User:             s.Who().User,
		KeyAlias:         s.Who().Alias,
		Team:             s.Who().Team,
		ClientIP:         s.Who().ClientIP,
		Route:            path,
		Servers:          append([]string{}, s.route.servers...),
		Created:          s.Created().UTC().Format(time.RFC3339),
		IdleSeconds:      max(0, now.Sub(s.LastUsed()).Seconds()),
		InFlight:         s.InFlight(),
		UpstreamSessions: up,
	}
}

// FleetSessionsReport reports every live downstream session of the fleet
// (S13.1, S15): this replica's from its memory, the others' from their
// records in the shared state, each naming the replicas holding a copy.
// A session whose replica stopped is still listed (any replica resumes
// it). When the shared state does not answer, the report has this
// replica's sessions and says that it may miss the others'. Outside
// fleet mode it is this replica's sessions.
func (g *Gateway) FleetSessionsReport(ctx context.Context) SessionsReport {
	all, incomplete, _ := g.fleetSessions(ctx)
	infos := make([]SessionInfo, 0, len(all))
	for _, fs := range all {
		infos = append(infos, fs.info)
	}
	rep := g.report(infos)
	rep.Incomplete = incomplete
	if live := g.peers.LiveIDs(); g.records != nil && live != nil {
		rep.Replicas = slices.Sorted(maps.Keys(live))
	}
	return rep
}

// report totals and sorts infos.
func (g *Gateway) report(infos []SessionInfo) SessionsReport {
	rep := SessionsReport{Instance: g.instance, Sessions: infos}
	if rep.Sessions == nil {
		rep.Sessions = []SessionInfo{}
	}
	byClient, byUser := map[string]int{}, map[string]int{}
	for _, info := range rep.Sessions {
		byClient[info.ClientName]++
		byUser[info.User]++
	}
	sort.Slice(rep.Sessions, func(i, j int) bool {
		a, b := rep.Sessions[i], rep.Sessions[j]
		if a.Created != b.Created {
			return a.Created < b.Created
		}
		return a.IDPrefix < b.IDPrefix
	})
	rep.Total = len(rep.Sessions)
	rep.ByClient, rep.ByUser = breakdown(byClient), breakdown(byUser)
	return rep
}

// fleetSession is one session of the fleet as an operator's action
// matches it.
type fleetSession struct {
	info SessionInfo
	hash string // hashHex of its local id, as terminations and the shared state key it
	// idPrefix is what a termination's prefix is matched against: the
	// local id of a copy held here, the recorded prefix of one held
	// elsewhere (recordPrefixLen).
	idPrefix string
	local    *session // this replica's copy; nil: held elsewhere or nowhere
}

// localSessions is every live session this replica holds.
func (g *Gateway) localSessions(now time.Time) []fleetSession {
	var out []fleetSession
	for _, s := range g.sessions.All() {
		if s.Closed() {
			continue
		}
		info := g.infoOf(s, now)
		if g.records != nil {
			info.Replicas = []string{g.instance}
		}
		out = append(out, fleetSession{info: info, hash: s.Hash(), idPrefix: s.ID(), local: s})
	}
	return out
}

// recordPrefixLen is how much of a session's local id its record in the
// shared state keeps, for terminations by prefix on other replicas: 64
// bits, never the whole id.
const recordPrefixLen = 16

// sessionRecord is what the fleet's report and terminations know of a
// session held elsewhere: the fields of its shared state.
type sessionRecord struct {
	Prefix   string   `json:"p"`
	User     string   `json:"u,omitempty"`
	Alias    string   `json:"k,omitempty"`
	Team     string   `json:"t,omitempty"`
	ClientIP string   `json:"ip,omitempty"`
	Route    string   `json:"r"`
	Servers  []string `json:"s"`
	Created  string   `json:"c"`
}

type clientRecord struct {
	Name    string `json:"n,omitempty"`
	Version string `json:"v,omitempty"`
}

// maxRecordedClient bounds the client name and version a record keeps
// (the client chose them).
const maxRecordedClient = 256

// sessionRecord is the fields s's copy here writes to its shared state
// (writeLive): live, its record, this replica holding it now, and its
// client when this copy saw the initialize. Every field stays within
// state.MaxFieldLen whatever the client sent or the route holds: a
// refused write would lose live, and with it the session's fleet-wide
// idleness.
func (g *Gateway) sessionRecord(s *session) (map[string]string, error) {
	info := g.infoOf(s, g.now())
	r := sessionRecord{Prefix: s.ID()[:min(recordPrefixLen, len(s.ID()))], User: info.User, Alias: info.KeyAlias,
		Team: info.Team, ClientIP: info.ClientIP, Route: info.Route, Servers: info.Servers, Created: info.Created}
	rec, err := json.Marshal(r)
	if err == nil && len(rec) > state.MaxFieldLen {
		r.Servers = nil // a route of very many servers: its path says which
		rec, err = json.Marshal(r)
	}
	if err != nil {
		return nil, err
	}
	fields := map[string]string{fieldLive: "1", fieldHeldPrefix + g.instance: strconv.FormatInt(g.now().UnixMilli(), 10)}
	if len(rec) <= state.MaxFieldLen {
		fields[fieldInfo] = string(rec)
	}
	if info.ClientName != "" || info.ClientVersion != "" {
		c, err := json.Marshal(clientRecord{Name: cutUTF8(info.ClientName, maxRecordedClient), Version: cutUTF8(info.ClientVersion, maxRecordedClient)})
		if err != nil {
			return nil, err
		}
		fields[fieldClient] = string(c)
	}
	return fields, nil
}

// cutUTF8 cuts s to at most n bytes, at a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// fleetSessions is every session of the fleet: this replica's, then (in
// fleet mode) those the shared state records that it does not hold.
// incomplete says why others may be missing ("" when none is); err
// (ErrFleetUnreachable) when the shared state did not answer, and only
// this replica's are returned.
func (g *Gateway) fleetSessions(ctx context.Context) (all []fleetSession, incomplete string, err error) {
	now := g.now()
	all = g.localSessions(now)
	if g.records == nil {
		return all, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*busTimeout)
	defer cancel()
	recs, complete, err := g.records.ListSessions(ctx, state.MaxListSessions, fieldInfo, fieldClient, fieldHeldPrefix)
	if err != nil {
		g.log.Warn("could not list the other replicas' sessions from the shared state", "error", err)
		return all, "the shared state (" + g.records.Name() + ") did not answer: only the sessions of replica " + g.instance + " are listed", ErrFleetUnreachable
	}
	if !complete {
		incomplete = fmt.Sprintf("the shared state holds more sessions than a report lists (%d)", state.MaxListSessions)
	}
	live := g.peers.LiveIDs()
	here := make(map[string]int, len(all))
	for i, fs := range all {
		here[fs.hash] = i
	}
	for _, r := range recs {
		var rec sessionRecord
		if json.Unmarshal([]byte(r.Fields[fieldInfo]), &rec) != nil || len(rec.Prefix) < idPrefixLen {
			continue // state written before records were (or not by a gateway)
		}
		var client clientRecord
		_ = json.Unmarshal([]byte(r.Fields[fieldClient]), &client)
		var holders []string
		var last int64
		for f, v := range r.Fields {
			replica, ok := strings.CutPrefix(f, fieldHeldPrefix)
			if !ok {
				continue
			}
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
				last = max(last, ms)
			}
			// This replica's own copies are known from its memory; a
			// stopped replica's copy died with it.
			if replica != g.instance && (live == nil || live[replica]) {
				holders = append(holders, replica)
			}
		}
		if i, ok := here[r.ID]; ok {
			info := &all[i].info
			info.Replicas = append(info.Replicas, holders...)
			slices.Sort(info.Replicas)
			if info.ClientName == "" && info.ClientVersion == "" {
				// A copy resumed here never saw the initialize.
				info.ClientName, info.ClientVersion = client.Name, client.Version
			}
			continue
		}
		slices.Sort(holders)
		info := SessionInfo{
			IDPrefix: rec.Prefix[:idPrefixLen], ClientName: client.Name, ClientVersion: client.Version,
			User: rec.User, KeyAlias: rec.Alias, Team: rec.Team, ClientIP: rec.ClientIP,
			Route: rec.Route, Servers: rec.Servers, Created: rec.Created, Replicas: holders,
		}
		if info.Servers == nil {
			info.Servers = []string{}
		}
		if info.Replicas == nil {
			info.Replicas = []string{}
		}
		if last > 0 {
			info.IdleSeconds = max(0, now.Sub(time.UnixMilli(last)).Seconds())
		}
		all = append(all, fleetSession{info: info, hash: r.ID, idPrefix: rec.Prefix})
	}
	return all, incomplete, nil
}

// matches reports whether fs is selected by a termination's id prefix
// and user ("" selects all). A session held elsewhere is matched on its
// recorded prefix: a longer prefix matches when that much of it does.
func (fs *fleetSession) matches(idPrefix, user string) bool {
	if user != "" && fs.info.User != user {
		return false
	}
	if idPrefix == "" {
		return true
	}
	if len(idPrefix) > len(fs.idPrefix) {
		return strings.HasPrefix(idPrefix, fs.idPrefix)
	}
	return strings.HasPrefix(fs.idPrefix, idPrefix)
}

// breakdown sorts counts by count (descending), the unknown label ("")
// last, then by label.
func breakdown(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{Label: k, Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Label == "") != (b.Label == "") {
			return b.Label == ""
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Label < b.Label
	})
	for i := range out {
		if out[i].Label == "" {
			out[i].Label = "unknown"
		}
	}
	return out
}

// ErrNoSelector refuses a termination that names no session: ending every
// session takes an explicit selector.
var ErrNoSelector = errors.New("session_id_prefix or user is required")

// ErrFleetUnreachable: a termination could not find the other replicas'
// sessions (the shared state did not answer); this replica's were ended.
var ErrFleetUnreachable = errors.New("the shared state did not answer: sessions held by other replicas could not be found, and were not ended")

// TerminateSessions ends, on every replica of the fleet, the sessions
// whose id starts with idPrefix and/or whose user is user (S13.2, S15):
// each is remembered as ended in the store first (S8.2: refused on every
// replica from then on), then this replica's copies end (their
// transports end and their in-flight calls are cancelled) and the other
// replicas are told to end theirs: it returns once they confirmed
// (fanout.go; res.Unconfirmed counts the sessions some replica did not
// confirm in time). A session whose end the
// store does not record is not ended: the error wraps ErrNotRecorded,
// and res has what was ended before (one of a local id, which opens here
// only, is ended all the same: it is in res, and the error says that its
// end was not remembered). When the other replicas' sessions
// cannot be found, this replica's are ended and the error is
// ErrFleetUnreachable. res.Terminated counts the sessions ended now,
// fleet-wide (one already ended is not counted again).
func (g *Gateway) TerminateSessions(ctx context.Context, idPrefix, user string) (res TerminateResult, err error) {
	if idPrefix == "" && user == "" {
		return TerminateResult{}, ErrNoSelector
	}
	now := g.now()
	res = TerminateResult{Sessions: []SessionInfo{}}
	all, _, unreachable := g.fleetSessions(ctx)
	var ended []string // the hashes of the sessions ended now
	defer func() {
		// Other replicas' copies of these sessions end before the
		// answer (fanout.go).
		res.Unconfirmed = g.announceEnded(ctx, ended...)
		res.Terminated = len(res.Sessions)
	}()
	for i := range all {
		fs := &all[i]
		if !fs.matches(idPrefix, user) {
			continue
		}
		if fs.local != nil {
			if fs.local.Closed() {
				continue
			}
			err := g.endSessionFor(ctx, fs.local)
			if !errors.Is(err, ErrNotRecorded) {
				// Ended, remembered or not (a local id); the operator
				// hears when it was not remembered.
				ended = append(ended, fs.local.Hash())
				res.Sessions = append(res.Sessions, fs.info)
			}
			if err != nil {
				return res, err
			}
			continue
		}
		// Held elsewhere, or by no replica now: remembered first, so that
		// no replica serves or resumes it from now on; then its copies
		// end and its state goes.
		if already, err := g.terms.IsTerminated(ctx, fs.hash, now); err != nil {
			return res, fmt.Errorf("%w: %w", ErrNotRecorded, err)
		} else if already {
			continue // ended before: its record is only stale
		}
		if err := g.terms.Mark(ctx, fs.hash); err != nil {
			return res, fmt.Errorf("%w: %w", ErrNotRecorded, err)
		}
		ended = append(ended, fs.hash)
		g.dropSessionState(ctx, fs.hash)
		res.Sessions = append(res.Sessions, fs.info)
	}
	return res, unreachable
}
