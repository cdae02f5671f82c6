package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// MaxTicketLen bounds the data of one ticket.
const MaxTicketLen = 64 << 10

// Tickets hold the short-lived records of browser flows that start on
// one replica and may finish on another behind a round-robin balancer: a
// pending OAuth login, an authorization code, a pending account connect.
// Take is atomic, so a single-use record is used once across the fleet.
type Tickets interface {
	// PutTicket stores data (at most MaxTicketLen bytes) under key for
	// ttl (> 0), replacing what was there.
	PutTicket(ctx context.Context, key string, data []byte, ttl time.Duration) error
	// GetTicket returns key's data; ok is false when there is none or its
	// ttl ran out.
	GetTicket(ctx context.Context, key string) (data []byte, ok bool, err error)
	// TakeTicket returns key's data and deletes it in one step: of
	// concurrent takers at most one gets ok.
	TakeTicket(ctx context.Context, key string) (data []byte, ok bool, err error)
}

// CheckTicket reports ErrInvalid unless key is 1 to MaxKeyLen bytes, data
// at most MaxTicketLen and ttl at least a millisecond.
func CheckTicket(key string, data []byte, ttl time.Duration) error {
	if err := CheckKey("ticket key", key); err != nil {
		return err
	}
	if len(data) > MaxTicketLen {
		return fmtInvalid("ticket data must be at most %d bytes (got %d)", MaxTicketLen, len(data))
	}
	return CheckTTL(ttl)
}

type memTicket struct {
	data []byte
	exp  time.Time
}

// PutTicket implements Tickets.
func (m *Memory) PutTicket(_ context.Context, key string, data []byte, ttl time.Duration) error {
	if err := CheckTicket(key, data, ttl); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if err := m.write("put ticket", now); err != nil {
		return err
	}
	m.tickets[key] = memTicket{data: append([]byte(nil), data...), exp: now.Add(ttl)}
	return nil
}

// GetTicket implements Tickets.
func (m *Memory) GetTicket(_ context.Context, key string) ([]byte, bool, error) {
	return m.ticket("get ticket", key, false)
}

// TakeTicket implements Tickets.
func (m *Memory) TakeTicket(_ context.Context, key string) ([]byte, bool, error) {
	return m.ticket("take ticket", key, true)
}

func (m *Memory) ticket(op, key string, take bool) ([]byte, bool, error) {
	if err := CheckKey("ticket key", key); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(op); err != nil {
		return nil, false, err
	}
	t, ok := m.tickets[key]
	if !ok || !m.now().Before(t.exp) {
		return nil, false, nil
	}
	if take {
		delete(m.tickets, key)
	}
	return append([]byte(nil), t.data...), true, nil
}

func fmtInvalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// PutTicketJSON stores v, encoded as JSON, under key for ttl.
func PutTicketJSON(ctx context.Context, t Tickets, key string, v any, ttl time.Duration) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: ticket value: %v", ErrInvalid, err)
	}
	return t.PutTicket(ctx, key, data, ttl)
}

// TicketJSON decodes key's data into v, taking the ticket when take is
// set; ok is false when there is none (or it does not decode into v).
func TicketJSON(ctx context.Context, t Tickets, key string, v any, take bool) (ok bool, err error) {
	op := t.GetTicket
	if take {
		op = t.TakeTicket
	}
	data, ok, err := op(ctx, key)
	if err != nil || !ok {
		return false, err
	}
	return json.Unmarshal(data, v) == nil, nil
}
