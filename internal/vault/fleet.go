package vault

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// FleetLock is the fleet's lease service (state.Leases): with it, a
// refresh is single-flight across replicas, not only within this one. A
// rotating refresh token spent by two replicas at once gets the second
// refused, and an authorization server that detects reuse revokes the
// whole grant: the person would have to connect again.
type FleetLock interface {
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, holder string) error
}

// leaseWait is how often a refresh waiting for another replica's asks
// again; the other's result is then read from the store.
const leaseWait = 50 * time.Millisecond

// ShareRefreshes makes refreshes single-flight across the fleet through
// l. Call it before the vault is used.
func (v *Vault) ShareRefreshes(l FleetLock) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	v.fleet, v.holder = l, hex.EncodeToString(b[:])
}

// fleetLock takes the entry's fleet lease, waiting while another replica
// holds it (bounded by ctx, the refresh's own timeout). The returned
// function releases it. Without a fleet, or while the lease service is
// unreachable, the refresh goes on unleased: a refresh that may be done
// twice is better than a call that fails for want of a lock (and the
// in-process lock still holds).
func (v *Vault) fleetLock(ctx context.Context, id string) (func(), error) {
	if v.fleet == nil {
		return func() {}, nil
	}
	// The lease name says neither the person nor the server.
	sum := sha256.Sum256([]byte(id))
	key := "vault-refresh:" + hex.EncodeToString(sum[:16])
	// The lease outlives the refresh's own bound, so that it never
	// lapses under a refresh still running.
	ttl := RefreshTimeout + 5*time.Second
	for {
		ok, err := v.fleet.AcquireLease(ctx, key, v.holder, ttl)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return func() {}, nil
		}
		if ok {
			return func() {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				_ = v.fleet.ReleaseLease(rctx, key, v.holder) // else it lapses
			}, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(leaseWait):
		}
	}
}
