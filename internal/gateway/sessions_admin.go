package gateway

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"
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
	IdleSeconds   float64  `json:"idle_seconds"`
	InFlight      int      `json:"in_flight"`
	// UpstreamSessions counts the upstream sessions the session's calls
	// use: the live upstream sessions of its servers.
	UpstreamSessions int `json:"upstream_sessions"`
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
}

// TerminateResult is POST /admin/v1/sessions/terminate (S13.2).
type TerminateResult struct {
	Terminated int           `json:"terminated"`
	Sessions   []SessionInfo `json:"sessions"`
}

// idPrefixLen is how much of a session id operators see.
const idPrefixLen = 8

func (g *Gateway) infoOf(s *session, now time.Time) SessionInfo {
	s.mu.Lock()
	name, version := s.clientName, s.clientVersion
	s.mu.Unlock()
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
		IDPrefix:         s.id[:idPrefixLen],
		ClientName:       name,
		ClientVersion:    version,
		User:             s.user,
		KeyAlias:         s.alias,
		Team:             s.team,
		ClientIP:         s.clientIP,
		Route:            path,
		Servers:          append([]string{}, s.route.servers...),
		Created:          s.created.UTC().Format(time.RFC3339),
		IdleSeconds:      max(0, now.Sub(time.Unix(0, s.lastUsed.Load())).Seconds()),
		InFlight:         int(s.inflight.Load()),
		UpstreamSessions: up,
	}
}

// SessionsReport reports every live downstream session (S13.1).
func (g *Gateway) SessionsReport() SessionsReport {
	now := g.now()
	rep := SessionsReport{Instance: g.instance, Sessions: []SessionInfo{}}
	byClient, byUser := map[string]int{}, map[string]int{}
	g.sessions.Range(func(_, v any) bool {
		s := v.(*session)
		if s.isClosed() {
			return true
		}
		info := g.infoOf(s, now)
		rep.Sessions = append(rep.Sessions, info)
		byClient[info.ClientName]++
		byUser[info.User]++
		return true
	})
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

// TerminateSessions ends the sessions whose id starts with idPrefix and/or
// whose user is user (S13.2): their transports end, their in-flight calls
// are cancelled, and their ids are remembered so that their clients are
// told to start over (S8.2). With a Bus, the copies other replicas hold of
// them end too (fanout.go).
func (g *Gateway) TerminateSessions(ctx context.Context, idPrefix, user string) (TerminateResult, error) {
	if idPrefix == "" && user == "" {
		return TerminateResult{}, ErrNoSelector
	}
	now := g.now()
	res := TerminateResult{Sessions: []SessionInfo{}}
	var victims []*session
	g.sessions.Range(func(_, v any) bool {
		s := v.(*session)
		if (idPrefix == "" || strings.HasPrefix(s.id, idPrefix)) && (user == "" || s.user == user) && !s.isClosed() {
			victims = append(victims, s)
		}
		return true
	})
	ended := victims[:0:0]
	for _, s := range victims {
		info := g.infoOf(s, now)
		if err := g.endSession(ctx, s); err != nil {
			g.announceTerminated(ctx, ended)
			return res, err
		}
		ended = append(ended, s)
		res.Sessions = append(res.Sessions, info)
	}
	// Other replicas' copies of these sessions end too (fanout.go).
	g.announceTerminated(ctx, ended)
	res.Terminated = len(res.Sessions)
	return res, nil
}
