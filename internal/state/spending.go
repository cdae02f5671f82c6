package state

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Spending counts what each key of the fleet spent in a period (a key's
// budget, issue 22 hole 15): one sum per opaque key (the gateway makes it
// of the caller and the period), reserved before a call in one step and
// corrected after it, so that replicas that each read the same budget
// cannot all spend it. A sum lapses ttl after its last write.
type Spending interface {
	// Reserve adds r.Cost to key's sum when the sum is below r.Limit, in
	// one step. The answer's Spent is the sum before the reservation. A
	// key with no sum is seeded with r.Seed when r.Seeded (the spending a
	// durable log already holds); otherwise nothing is written and the
	// answer says Unknown, for the caller to read the seed and ask again.
	Reserve(ctx context.Context, key string, r Reservation) (SpendDecision, error)
	// Spend adds delta (negative to release a reservation) to key's sum,
	// if it has one, and renews its ttl.
	Spend(ctx context.Context, key string, delta float64, ttl time.Duration) error
}

// Reservation is one call's claim on a sum (Spending.Reserve).
type Reservation struct {
	Limit  float64 // the sum must be below it
	Cost   float64 // added when it is (>= 0)
	TTL    time.Duration
	Seed   float64 // the sum of a key that has none, when Seeded
	Seeded bool
}

// SpendDecision is the answer of Spending.Reserve.
type SpendDecision struct {
	Allowed bool
	Unknown bool    // the key has no sum and no seed was given
	Spent   float64 // the sum before this reservation
}

// CheckReservation reports ErrInvalid unless key is a key, the limit,
// cost and seed are finite (cost and seed >= 0) and ttl is at least a
// millisecond (for backends outside this package).
func CheckReservation(key string, r Reservation) error {
	if err := CheckKey("spending key", key); err != nil {
		return err
	}
	if bad(r.Limit) || bad(r.Cost) || r.Cost < 0 || bad(r.Seed) || r.Seed < 0 {
		return fmt.Errorf("%w: a reservation needs finite amounts, cost and seed >= 0", ErrInvalid)
	}
	return CheckTTL(r.TTL)
}

// CheckSpend is CheckReservation for Spending.Spend.
func CheckSpend(key string, delta float64, ttl time.Duration) error {
	if err := CheckKey("spending key", key); err != nil {
		return err
	}
	if bad(delta) {
		return fmt.Errorf("%w: spending must be finite", ErrInvalid)
	}
	return CheckTTL(ttl)
}

func bad(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

type memSpent struct {
	sum float64
	exp time.Time
}

// Reserve implements Spending.
func (m *Memory) Reserve(_ context.Context, key string, r Reservation) (SpendDecision, error) {
	if err := CheckReservation(key, r); err != nil {
		return SpendDecision{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("reserve", now); err != nil {
		return SpendDecision{}, err
	}
	s, ok := m.spent[key]
	if !ok || !now.Before(s.exp) {
		if !r.Seeded {
			return SpendDecision{Unknown: true}, nil
		}
		s = memSpent{sum: r.Seed}
	}
	d := SpendDecision{Spent: s.sum}
	if s.sum < r.Limit {
		s.sum += r.Cost
		d.Allowed = true
	}
	s.exp = now.Add(r.TTL)
	if m.spent == nil {
		m.spent = map[string]memSpent{}
	}
	m.spent[key] = s
	return d, nil
}

// Spend implements Spending.
func (m *Memory) Spend(_ context.Context, key string, delta float64, ttl time.Duration) error {
	if err := CheckSpend(key, delta, ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("spend", now); err != nil {
		return err
	}
	s, ok := m.spent[key]
	if !ok || !now.Before(s.exp) {
		return nil
	}
	m.spent[key] = memSpent{sum: s.sum + delta, exp: now.Add(ttl)}
	return nil
}
