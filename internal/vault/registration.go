package vault

import (
	"context"
	"fmt"
	"slices"
)

// Client registrations: what the gateway registered, once per server, at
// an oauth2_user server's authorization server (a client id, perhaps a
// secret, and what it needs to use them). They are the gateway's, not a
// person's, yet must outlive a restart as the people's tokens do (a
// refresh needs the client the tokens were issued to) and hold a secret:
// so they are entries of this vault under a reserved person no caller can
// be, sealed, named and rotated as every entry is. The document is opaque
// here (the gateway's JSON); Get, List, Put, Touch, Refresh and Delete
// never reach these entries.

const (
	// registrationPerson is the reserved person of registrations: a NUL
	// byte starts no person id (callers.PersonID ids are "key:" or
	// "oidc:" ones), and checkIDs refuses it for entries.
	registrationPerson = "\x00registration"
	kindRegistration   = "registration"
)

// PutRegistration stores doc as the client registration for server,
// replacing any.
func (v *Vault) PutRegistration(ctx context.Context, server string, doc []byte) error {
	if err := checkServer(server); err != nil {
		return fmt.Errorf("vault put registration: %w", err)
	}
	if len(doc) == 0 {
		return fmt.Errorf("vault put registration: empty document: %w", ErrInvalid)
	}
	unlock, err := v.lock(ctx, memID(registrationPerson, server))
	if err != nil {
		return fmt.Errorf("vault put registration: %w", err)
	}
	defer unlock()
	p := plaintext{Person: registrationPerson, Server: server, Kind: kindRegistration, Registration: slices.Clone(doc), UpdatedAt: utc(v.now())}
	if err := v.writePlain(ctx, p); err != nil {
		return fmt.Errorf("vault put registration (server %q): %w", server, err)
	}
	return nil
}

// GetRegistration returns the client registration stored for server, or
// ErrNotFound. It is read from the store on every call: callers keep what
// they use in memory.
func (v *Vault) GetRegistration(ctx context.Context, server string) ([]byte, error) {
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("vault get registration: %w", err)
	}
	p, _, err := v.readPlain(ctx, registrationPerson, server)
	if err == nil && (p.Kind != kindRegistration || len(p.Registration) == 0) {
		err = fmt.Errorf("%w: the entry is not a registration", ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("vault get registration (server %q): %w", server, err)
	}
	return p.Registration, nil
}

// DeleteRegistration removes server's client registration; ErrNotFound
// when there was none.
func (v *Vault) DeleteRegistration(ctx context.Context, server string) error {
	if err := checkServer(server); err != nil {
		return fmt.Errorf("vault delete registration: %w", err)
	}
	return v.delete(ctx, registrationPerson, server)
}

func checkServer(server string) error { return checkID("server", server) }
