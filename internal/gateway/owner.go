package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	sessions "github.com/mcpgate/mcpgate/internal/session"
)

// Identity is what the gateway knows of the caller of a request, set by
// the authentication gate (SPEC S5) before the request reaches a session.
type Identity struct {
	// Owner is the owner fingerprint of S4.1: "oidc:", "key:", "user:",
	// "oauth:" or "ip:" followed by a sha256 hex, or "anonymous". Never a raw
	// secret, user id or address.
	Owner    string
	Alias    string // key alias, "" for none
	User     string
	Team     string
	ClientIP string
	Admin    bool
	// Issuer and Subject name a JWT caller (SPEC S5.3); "" otherwise.
	Issuer  string
	Subject string
}

type identityKey struct{}

// WithIdentity attaches the caller's identity to ctx.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity attached to ctx, or nil.
func IdentityFrom(ctx context.Context) *Identity {
	id, _ := ctx.Value(identityKey{}).(*Identity)
	return id
}

// identityOf is the request's identity: the caller's, set by the
// authentication gate; for a request that bypassed it (the stdio front, a
// handler called directly), what its address says (S4.1).
func identityOf(r *http.Request) *Identity {
	if id := IdentityFrom(r.Context()); id != nil {
		return id
	}
	c := &callers.Caller{Anonymous: true}
	return &Identity{Owner: callers.OwnerOf(c, r), ClientIP: callers.ClientIP(r)}
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Bodies of the session-ownership refusals: contracts (S4.2, S4.3, S8.1).
var (
	bodyForeignSession = map[string]string{"error": "Forbidden", "details": "mcp-session-id is bound to a different caller."}
	bodyTooManySession = map[string]string{"error": "Too Many Requests", "details": "Too many active MCP sessions for this caller."}
	bodyTerminated     = map[string]string{"message": "Session terminated successfully"}
)

// Terminations remembers the session ids that were ended (S8.2), by
// hash; the store backs it across restarts (sessions.Terminations).
type Terminations = sessions.Terminations

// endSessionFor ends session s (its client's DELETE, an administrator's
// termination, the gateway's own end of it) and remembers its id as ended
// for the idle timeout, so that a client still using it gets 404 and
// starts over (S8.2) even when sessions.unknown_id serves unknown ids.
// The id is remembered before the session ends: a request racing the end
// must find one or the other. Its copy here ends (its calls in flight
// are cancelled) and its shared state goes.
//
// When the store does not remember the id, what the id is decides:
//
//   - a sealed id opens on any replica, so an end the store does not know
//     could be undone by the next request anywhere: nothing changes, and
//     the error wraps ErrNotRecorded (the caller refuses: 503);
//   - a local id opens on this replica only: ending it here ends it, and
//     the error (not ErrNotRecorded) says only that its id was not
//     remembered.
func (g *Gateway) endSessionFor(ctx context.Context, s *session) error {
	err := g.terms.Mark(ctx, s.Hash())
	if err != nil && s.Token() != "" {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	s.close()
	g.dropSessionState(ctx, s.Hash())
	if err != nil {
		return fmt.Errorf("remember ended session: %w", err)
	}
	return nil
}

// ErrNotRecorded: the store did not record the end of a session, so it
// was not ended (S8.2: an end is made durable or refused).
var ErrNotRecorded = errors.New("the store did not record the end of the session")

// refuseUnrecorded answers a client's DELETE whose end the store did not
// record: 503, the session unchanged.
func (g *Gateway) refuseUnrecorded(w http.ResponseWriter, err error) {
	g.log.Warn("session DELETE refused: the store did not record it", "error", err)
	w.Header().Set("Retry-After", "1")
	writeRPCError(w, http.StatusServiceUnavailable, jsonrpc.NewError(jsonrpc.CodeInternalError,
		"Service Unavailable: the session could not be ended now (the gateway's store does not answer); it is unchanged: send the DELETE again shortly"))
}

// endSessionLogged is endSessionFor for the gateway's own ends of a
// session (it expired, its owner's cap evicted it, its initialize
// failed), which have no one to report to and no one to retry: the
// session ends here whatever the store says, and a failure to remember it
// is logged.
func (g *Gateway) endSessionLogged(ctx context.Context, s *session) {
	err := g.endSessionFor(ctx, s)
	if err == nil {
		return
	}
	g.log.Warn("could not remember an ended session", "error", err)
	if errors.Is(err, ErrNotRecorded) {
		s.close()
		g.dropSessionState(ctx, s.Hash())
	}
}

// admitSession applies the per-owner cap before a new session for owner is
// created (S4.3): the owner's own oldest idle sessions are evicted to make
// room; other owners are never touched. false: still at the cap.
func (g *Gateway) admitSession(owner string) bool {
	return g.sessions.Admit(owner, g.maxPerOwner, func(s *session) {
		g.log.Debug("session evicted for its owner's cap", "session", s.Short())
		g.retire(s)
	})
}
