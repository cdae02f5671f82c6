package state

import (
	"context"
	"time"
)

// Leases are short exclusive holds on a name across the fleet: one
// replica at a time runs what the name guards (a vault refresh, whose
// rotating refresh token two replicas must not spend twice). A lease
// lapses after its ttl, so a replica that dies holding one blocks the
// others for at most that long.
type Leases interface {
	// AcquireLease takes the lease key for holder for ttl (> 0) unless
	// another holder has it; the same holder acquiring again renews it.
	// false, nil: another holder has it.
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives the lease up if holder still has it; a lease
	// another holder took meanwhile (this one lapsed) is left alone.
	ReleaseLease(ctx context.Context, key, holder string) error
}

func checkLease(key, holder string, ttl time.Duration) error {
	if err := CheckKey("lease key", key); err != nil {
		return err
	}
	if err := CheckKey("lease holder", holder); err != nil {
		return err
	}
	return CheckTTL(ttl)
}

// CheckLease reports ErrInvalid unless key and holder are 1 to MaxKeyLen
// bytes and ttl is at least a millisecond (for backends outside this
// package).
func CheckLease(key, holder string, ttl time.Duration) error { return checkLease(key, holder, ttl) }

type memLease struct {
	holder string
	exp    time.Time
}

// AcquireLease implements Leases.
func (m *Memory) AcquireLease(_ context.Context, key, holder string, ttl time.Duration) (bool, error) {
	if err := checkLease(key, holder, ttl); err != nil {
		return false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("acquire lease", now); err != nil {
		return false, err
	}
	if l, ok := m.leases[key]; ok && now.Before(l.exp) && l.holder != holder {
		return false, nil
	}
	m.leases[key] = memLease{holder: holder, exp: now.Add(ttl)}
	return true, nil
}

// ReleaseLease implements Leases.
func (m *Memory) ReleaseLease(_ context.Context, key, holder string) error {
	if err := checkLease(key, holder, time.Millisecond); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("release lease"); err != nil {
		return err
	}
	if l, ok := m.leases[key]; ok && l.holder == holder {
		delete(m.leases, key)
	}
	return nil
}
