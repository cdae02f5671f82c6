package gateway

import (
	"context"
	"net/url"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/tracing"
)

// Tool integrity (issue 27) in the gateway is two hooks: the keeper
// reviews every list the catalog fetches (and the catalog serves only
// what it lets through), and a call naming a definition it holds is
// refused here with a message that says why, rather than as an unknown
// name. Everything else is the keeper's (internal/integrity).

// attachIntegrity makes k the catalog's reviewer, deciding by the
// configuration this gateway serves.
func (g *Gateway) attachIntegrity(k *integrity.Keeper) {
	if k == nil {
		return
	}
	g.integrity = k
	k.Attach(g.integrityPolicy, g.integrityReleased)
	g.cat.SetReviewer(k)
}

// integrityPolicy is server's integrity settings as configured now
// (reloads and runtime servers included).
func (g *Gateway) integrityPolicy(server string) integrity.Policy {
	cfg := g.conf()
	mode, approve := cfg.IntegrityOf(server)
	p := integrity.Policy{Mode: mode, Approve: approve}
	if s := cfg.Servers[server]; s != nil {
		if s.Provenance != nil {
			p.Source, p.Version = s.Provenance.Source, s.Provenance.Version
		}
		for _, raw := range []string{s.URL, s.BaseURL, s.Spec} {
			if u, err := url.Parse(raw); err == nil && u.Hostname() != "" {
				p.Hosts = append(p.Hosts, u.Hostname())
			}
		}
	}
	return p
}

// integrityReleased is called after server's reviews were settled (here
// or, through the admin bus, on another replica): its lists are read
// again and reviewed, and its clients told they changed.
func (g *Gateway) integrityReleased(server string) {
	g.cat.InvalidateServer(server)
	for _, k := range []catalog.Kind{catalog.Tools, catalog.Prompts, catalog.Resources} {
		g.broadcastListChanged(server, k)
	}
}

// heldRefusal is the error for a tools/call or prompts/get whose name
// matches no served item but one the keeper holds; nil when none does.
func (g *Gateway) heldRefusal(ctx context.Context, cands []toolRef, k catalog.Kind, what, name string) *jsonrpc.Error {
	if g.integrity == nil {
		return nil
	}
	kind := integrity.PinKind(k)
	for _, c := range cands {
		if g.integrity.Held(c.server, kind, c.name) {
			tracing.NoteOutcome(ctx, tracing.OutcomeRefused, "integrity")
			return errInvalidParams("The %s %s changed (or is new) since it was approved and awaits review by an administrator; it cannot be used until then", what, name)
		}
	}
	return nil
}
