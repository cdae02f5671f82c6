package config

import (
	"maps"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
)

// normalise puts expanded values in the form consumers compare against,
// so that they need no trimming or case folding of their own: first what
// the tags say (trim, lower, path, command) for every field, then the
// rules no tag expresses.
func (c *Config) normalise() error {
	var errs errorList
	c.normaliseFields(typeOf(reflect.TypeFor[Config]()), reflect.ValueOf(c).Elem())
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
	if a := c.Auth; a != nil {
		for i := range a.Keys {
			k := &a.Keys[i]
			for j, s := range k.AllowedCIDRs {
				// An invalid entry is left as written for validate to report.
				if p, ok := parseCIDR(strings.TrimSpace(s)); ok {
					k.AllowedCIDRs[j] = p.String()
				}
			}
		}
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
		if s.Transport == TransportOpenAPI && s.Spec != "" && !IsSpecURL(s.Spec) && !filepath.IsAbs(s.Spec) && c.Dir != "" {
			// A document beside the config file, wherever the gateway runs.
			s.Spec = filepath.Join(c.Dir, s.Spec)
		}
		if s.Cwd == "" && s.Transport == TransportStdio {
			// Run the server where its relative command was found, not
			// wherever the gateway happened to be started.
			s.Cwd = c.Dir
		}
	}
	return errs.err()
}

// normaliseFields applies the trim, lower, path and command tags to the
// struct v and everything in it. A secret is trimmed too: one with
// surrounding whitespace could never match, as HTTP strips it from header
// values (a trailing newline from a secrets file is the usual cause).
func (c *Config) normaliseFields(ti *typeInfo, v reflect.Value) {
	str := func(f *fieldInfo, s string) string {
		if f.trim {
			s = strings.TrimSpace(s)
		}
		if f.lower {
			s = strings.ToLower(s)
		}
		switch {
		case s == "":
		case f.path:
			s = c.resolvePath(s)
		case f.command:
			s = c.resolveCommand(s)
		}
		return s
	}
	for _, f := range ti.fields {
		fv := v.Field(f.index)
		switch f.kind {
		case kString:
			fv.SetString(str(f, fv.String()))
		case kStrings:
			for i := range fv.Len() {
				e := fv.Index(i)
				e.SetString(str(f, e.String()))
			}
		case kStruct:
			c.normaliseFields(f.elem, fv)
		case kStructPtr:
			if !fv.IsNil() {
				c.normaliseFields(f.elem, fv.Elem())
			}
		case kStructList:
			for i := range fv.Len() {
				c.normaliseFields(f.elem, fv.Index(i))
			}
		case kStructMap:
			for it := fv.MapRange(); it.Next(); {
				e := it.Value()
				if f.elemPt {
					c.normaliseFields(f.elem, e.Elem())
					continue
				}
				cp := reflect.New(e.Type()).Elem()
				cp.Set(e)
				c.normaliseFields(f.elem, cp)
				fv.SetMapIndex(it.Key(), cp)
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
