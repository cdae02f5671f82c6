package config

import (
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// normalise puts expanded values in the form consumers compare against,
// so that they need no trimming or case folding of their own.
func (c *Config) normalise() error {
	var errs errorList
	c.Listen = strings.TrimSpace(c.Listen)
	for i, o := range c.AllowedOrigins {
		// Browsers send Origin lower-cased and without a trailing slash.
		c.AllowedOrigins[i] = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
	}
	for i, h := range c.AllowedHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		}
		c.AllowedHosts[i] = h
	}
	c.MetricsListen = strings.TrimSpace(c.MetricsListen)
	c.Sessions.UnknownID = strings.ToLower(strings.TrimSpace(c.Sessions.UnknownID))
	if c.DataDir = strings.TrimSpace(c.DataDir); c.DataDir != "" {
		c.DataDir = c.resolvePath(c.DataDir)
	}
	if a := c.Auth; a != nil {
		a.normalise()
	}
	for _, name := range c.ServerNames() {
		s, p := c.Servers[name], joinPath("servers", name)
		if len(s.Headers) > 0 {
			hs := make(map[string]string, len(s.Headers))
			for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
				tk := strings.TrimSpace(k)
				if _, dup := hs[tk]; dup {
					errs.add(joinPath(p+".headers", tk), 0, "duplicate header")
					continue
				}
				hs[tk] = strings.TrimSpace(s.Headers[k])
			}
			s.Headers = hs
		}
		if a := s.Auth; a != nil {
			a.Type = strings.ToLower(strings.TrimSpace(a.Type))
			a.HeaderName = strings.TrimSpace(a.HeaderName)
			a.TokenURL = strings.TrimSpace(a.TokenURL)
			a.ClientID = strings.TrimSpace(a.ClientID)
			a.ClientSecret = strings.TrimSpace(a.ClientSecret)
			a.Audience = strings.TrimSpace(a.Audience)
		}
		if t := s.TLS; t != nil {
			for _, f := range []*string{&t.CAFile, &t.CertFile, &t.KeyFile} {
				if *f = strings.TrimSpace(*f); *f != "" {
					*f = c.resolvePath(*f)
				}
			}
		}
		s.Command = c.resolveCommand(s.Command)
		if s.Cwd != "" {
			s.Cwd = c.resolvePath(s.Cwd)
		} else if s.Transport == TransportStdio {
			// Run the server where its relative command was found, not
			// wherever the gateway happened to be started.
			s.Cwd = c.Dir
		}
	}
	return errs.err()
}

func (a *CallerAuth) normalise() {
	// A secret with surrounding whitespace could never match: HTTP strips
	// it from header values. A trailing newline from a secrets file is the
	// usual cause.
	a.MasterKey = strings.TrimSpace(a.MasterKey)
	if l := a.AllowedClients; l != nil {
		l.Header = strings.TrimSpace(l.Header)
		for i, v := range l.Values {
			l.Values[i] = strings.ToLower(strings.TrimSpace(v))
		}
	}
	for i := range a.Keys {
		k := &a.Keys[i]
		k.Alias = strings.TrimSpace(k.Alias)
		k.Key = strings.TrimSpace(k.Key)
		k.User = strings.TrimSpace(k.User)
		k.Team = strings.TrimSpace(k.Team)
		for j, s := range k.AllowedCIDRs {
			// An invalid entry is left as written for validate to report.
			if p, ok := parseCIDR(strings.TrimSpace(s)); ok {
				k.AllowedCIDRs[j] = p.String()
			}
		}
	}
}

// parseCIDR parses a CIDR or a bare IP (a /32 or /128) into its canonical
// prefix: masked, and IPv4-mapped IPv6 as IPv4, since that is how an IPv4
// client's address is seen.
func parseCIDR(s string) (netip.Prefix, bool) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

// resolveCommand resolves a relative command path against Dir. A bare name
// is left for PATH lookup when the server starts.
func (c *Config) resolveCommand(cmd string) string {
	if !strings.ContainsRune(cmd, '/') && !strings.ContainsRune(cmd, filepath.Separator) {
		return cmd
	}
	return c.resolvePath(cmd)
}

func (c *Config) resolvePath(p string) string {
	if c.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Dir, p)
}
