package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/mcpgate/mcpgate/internal/integrity"
)

// Tool integrity's review (issue 27): the definitions awaiting review,
// and their approval or rejection. The keeper (Options.Integrity) decides
// and records (its audit entries carry the admin as actor); this file
// checks the request, and announces a settlement so that every replica
// reads the server's lists again within a second.

// changeIntegrity names a server whose reviews were settled (Name: the
// server).
const changeIntegrity = "integrity"

// IntegrityList is GET /integrity's answer.
type IntegrityList struct {
	Changes []integrity.Change `json:"changes"`
}

// SettleRequest names the definitions to approve or reject; empty: all
// of the server's.
type SettleRequest struct {
	Tools []string `json:"tools"`
}

// SettleResult says what was settled.
type SettleResult struct {
	Server  string   `json:"server"`
	Settled []string `json:"settled"`
}

func (a *API) keeper() (*integrity.Keeper, error) {
	if a.o.Integrity == nil {
		return nil, refusal(http.StatusNotImplemented, "tool integrity is not wired in this gateway")
	}
	return a.o.Integrity, nil
}

func (a *API) listIntegrity(w http.ResponseWriter, r *http.Request) error {
	k, err := a.keeper()
	if err != nil {
		return err
	}
	server := r.URL.Query().Get("server")
	changes, err := k.Pending(r.Context(), server)
	if err != nil {
		return storeUnavailable("could not read the pins", err)
	}
	writeJSON(w, http.StatusOK, IntegrityList{Changes: changes})
	return nil
}

func (a *API) approveIntegrity(w http.ResponseWriter, r *http.Request) error {
	return a.settleIntegrity(w, r, true)
}

func (a *API) rejectIntegrity(w http.ResponseWriter, r *http.Request) error {
	return a.settleIntegrity(w, r, false)
}

func (a *API) settleIntegrity(w http.ResponseWriter, r *http.Request, approve bool) error {
	k, err := a.keeper()
	if err != nil {
		return err
	}
	server := r.PathValue("server")
	var req SettleRequest
	// The body is optional: none settles everything of the server.
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			return err
		}
	}
	for i, n := range req.Tools {
		if strings.TrimSpace(n) == "" {
			return badRequest(fmt.Sprintf("tools[%d]: must not be empty", i))
		}
	}
	settle := k.Reject
	if approve {
		settle = k.Approve
	}
	done, missing, err := settle(r.Context(), server, req.Tools, actor(r.Context()))
	switch {
	case errors.Is(err, integrity.ErrNothingPending):
		return notFound(fmt.Sprintf("nothing of server %q awaits review", server))
	case err != nil:
		return storeUnavailable("could not settle the review", err, "server", server)
	case len(missing) > 0:
		// What was found was settled; say what was not.
		a.announceSettled(r.Context(), server)
		slices.Sort(missing)
		return notFound("awaiting no review: " + strings.Join(missing, ", ")).withBody(map[string]any{
			"error": "Not Found", "details": "awaiting no review: " + strings.Join(missing, ", "), "settled": done})
	}
	a.announceSettled(r.Context(), server)
	writeJSON(w, http.StatusOK, SettleResult{Server: server, Settled: done})
	return nil
}

// announceSettled announces server's settlement. Its audit events are
// the keeper's, written before: one not every replica confirmed is
// recorded in one more ("integrity.unconfirmed", with "unconfirmed").
func (a *API) announceSettled(ctx context.Context, server string) {
	before := unconfirmedOf(ctx)
	a.announce(ctx, changeIntegrity, server)
	if unconfirmedOf(ctx) > before {
		a.audit(ctx, "integrity.unconfirmed", server, nil)
	}
}

// integrityChanged applies another replica's settlement: the server's
// lists are read again, and reviewed against the store's pins.
func (a *API) integrityChanged(_ context.Context, server string) {
	if a.o.Integrity != nil {
		a.o.Integrity.Reload(server)
	}
}
