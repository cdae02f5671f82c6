package callers

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/mcpgate/mcpgate/internal/config"
)

// Grants are what JWT callers may use, by user, team or role (config
// auth.grants). A caller gets the union of the grants it matches: the most
// permissive combination, since each grant is a reason to allow. Without a
// matching grant a JWT caller may use no server (deny by default).

// Subject is who grants are matched against.
type Subject struct {
	User  string
	Teams []string
	Roles []string
}

// Matches reports whether g applies to s.
func (s Subject) Matches(g *config.Grant) bool {
	switch {
	case g.User != "":
		return g.User == s.User
	case g.Team != "":
		return slices.Contains(s.Teams, g.Team)
	case g.Role != "":
		return slices.Contains(s.Roles, g.Role)
	}
	return false
}

// FromGrants returns the access part of a Caller for s: the union of the
// grants s matches. Servers nil means every server (some grant allows
// all); a server's tools are limited only when every matching grant that
// grants the server limits them, and a tool is denied only when every such
// grant denies it. The rate limit is the lowest non-zero one.
func FromGrants(grants []config.Grant, s Subject) Caller {
	var matched []*config.Grant
	for i := range grants {
		if s.Matches(&grants[i]) {
			matched = append(matched, &grants[i])
		}
	}
	c := Caller{Servers: []string{}}
	if len(matched) == 0 {
		return c
	}
	grantsServer := func(g *config.Grant, server string) bool {
		return g.Servers == nil || slices.Contains(g.Servers, server) || len(g.AccessGroups) > 0
	}
	allServers := false
	mentioned := map[string]bool{}
	for _, g := range matched {
		if g.Servers == nil {
			allServers = true
		}
		for _, srv := range g.Servers {
			if !slices.Contains(c.Servers, srv) {
				c.Servers = append(c.Servers, srv)
			}
		}
		for srv := range g.Tools {
			mentioned[srv] = true
		}
		for srv := range g.DenyTools {
			mentioned[srv] = true
		}
		c.Toolsets = union(c.Toolsets, g.Toolsets)
		c.AccessGroups = union(c.AccessGroups, g.AccessGroups)
		c.Admin = c.Admin || g.Admin
		if g.RateLimitRPM > 0 && (c.RateLimitRPM == 0 || g.RateLimitRPM < c.RateLimitRPM) {
			c.RateLimitRPM = g.RateLimitRPM
		}
	}
	if allServers {
		c.Servers = nil
	}
	for _, srv := range slices.Sorted(maps.Keys(mentioned)) {
		limited, allowed := true, []string(nil)
		var denied []string
		first := true
		for _, g := range matched {
			if !grantsServer(g, srv) {
				continue
			}
			tools, ok := g.Tools[srv]
			if !ok {
				limited = false
			} else {
				allowed = union(allowed, tools)
			}
			if first {
				denied = slices.Clone(g.DenyTools[srv])
				first = false
			} else {
				denied = slices.DeleteFunc(denied, func(t string) bool { return !slices.Contains(g.DenyTools[srv], t) })
			}
		}
		if first {
			continue // no matching grant grants the server
		}
		if limited {
			if c.Tools == nil {
				c.Tools = map[string][]string{}
			}
			c.Tools[srv] = append([]string{}, allowed...)
		}
		if len(denied) > 0 {
			if c.DenyTools == nil {
				c.DenyTools = map[string][]string{}
			}
			c.DenyTools[srv] = denied
		}
	}
	return c
}

func union(a, b []string) []string {
	for _, s := range b {
		if !slices.Contains(a, s) {
			a = append(a, s)
		}
	}
	return a
}

// GrantSet holds the grants JWT callers are judged with: the config file's
// and those added at runtime through the admin API, swapped as a whole so
// a request sees one consistent set. Safe for concurrent use.
type GrantSet struct {
	file    atomic.Pointer[[]config.Grant]
	runtime atomic.Pointer[[]config.Grant]
}

// NewGrantSet returns a set of the config file's grants.
func NewGrantSet(file []config.Grant) *GrantSet {
	s := &GrantSet{}
	s.SetFile(file)
	return s
}

// SetFile replaces the config file's grants (a reload): the next caller
// resolved reads the new ones.
func (s *GrantSet) SetFile(g []config.Grant) { s.file.Store(&g) }

// SetRuntime replaces the runtime grants.
func (s *GrantSet) SetRuntime(g []config.Grant) { s.runtime.Store(&g) }

// File returns the config file's grants; they must not be modified.
func (s *GrantSet) File() []config.Grant {
	if s == nil {
		return nil
	}
	if p := s.file.Load(); p != nil {
		return *p
	}
	return nil
}

// Runtime returns the runtime grants; they must not be modified.
func (s *GrantSet) Runtime() []config.Grant {
	if s == nil {
		return nil
	}
	if p := s.runtime.Load(); p != nil {
		return *p
	}
	return nil
}

// All returns the file's grants then the runtime ones.
func (s *GrantSet) All() []config.Grant {
	rt := s.Runtime()
	if len(rt) == 0 {
		return s.File()
	}
	return append(slices.Clip(s.File()), rt...)
}
