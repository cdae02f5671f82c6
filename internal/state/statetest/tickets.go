package statetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcpgate/mcpgate/internal/state"
)

var ticketTests = []test{
	{"PutGetTake", testTickets},
	{"TakeOnce", testTicketTakeOnce},
	{"Lapse", testTicketLapse},
	{"Bounds", testTicketBounds},
}

func testTickets(t *testing.T, b state.Backend) {
	ctx := t.Context()
	if _, ok, err := b.GetTicket(ctx, "login:1"); err != nil || ok {
		t.Fatalf("unknown ticket: ok %v, %v", ok, err)
	}
	mustNot(t, "PutTicket", b.PutTicket(ctx, "login:1", []byte(`{"a":1}`), long))
	mustNot(t, "PutTicket empty", b.PutTicket(ctx, "empty", nil, long))
	for range 2 { // Get leaves it
		got, ok, err := b.GetTicket(ctx, "login:1")
		if err != nil || !ok || string(got) != `{"a":1}` {
			t.Fatalf("GetTicket: %q %v %v", got, ok, err)
		}
	}
	mustNot(t, "PutTicket replace", b.PutTicket(ctx, "login:1", []byte("second"), long))
	got, ok, err := b.TakeTicket(ctx, "login:1")
	if err != nil || !ok || string(got) != "second" {
		t.Fatalf("TakeTicket: %q %v %v", got, ok, err)
	}
	if _, ok, _ := b.GetTicket(ctx, "login:1"); ok {
		t.Error("a taken ticket is still there")
	}
	if got, ok, err := b.GetTicket(ctx, "empty"); err != nil || !ok || len(got) != 0 {
		t.Errorf("empty ticket: %q %v %v", got, ok, err)
	}
}

func testTicketTakeOnce(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for i := range 5 {
		key := fmt.Sprintf("code:%d", i)
		mustNot(t, "PutTicket", b.PutTicket(ctx, key, []byte("x"), long))
		var won atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if _, ok, err := b.TakeTicket(ctx, key); err == nil && ok {
					won.Add(1)
				}
			})
		}
		wg.Wait()
		if n := won.Load(); n != 1 {
			t.Fatalf("%d of 8 concurrent takers got the ticket, want 1", n)
		}
	}
}

func testTicketLapse(t *testing.T, b state.Backend) {
	ctx := t.Context()
	mustNot(t, "PutTicket", b.PutTicket(ctx, "short", []byte("x"), ttl))
	eventually(t, "the ticket lapses", func() (bool, error) {
		_, ok, err := b.GetTicket(ctx, "short")
		return !ok, err
	})
	if _, ok, _ := b.TakeTicket(ctx, "short"); ok {
		t.Error("a lapsed ticket was taken")
	}
}

func testTicketBounds(t *testing.T, b state.Backend) {
	ctx := t.Context()
	for _, err := range []error{
		b.PutTicket(ctx, "", nil, long),
		b.PutTicket(ctx, strings.Repeat("k", state.MaxKeyLen+1), nil, long),
		b.PutTicket(ctx, "k", make([]byte, state.MaxTicketLen+1), long),
		b.PutTicket(ctx, "k", nil, 0),
	} {
		if !errors.Is(err, state.ErrInvalid) {
			t.Errorf("PutTicket out of bounds: %v, want ErrInvalid", err)
		}
	}
	if _, _, err := b.GetTicket(ctx, ""); !errors.Is(err, state.ErrInvalid) {
		t.Errorf("GetTicket empty key: %v", err)
	}
}
