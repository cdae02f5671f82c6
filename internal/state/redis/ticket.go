package redis

import (
	"context"
	"errors"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mcpgate/mcpgate/internal/state"
)

// PutTicket implements state.Tickets.
func (b *Backend) PutTicket(ctx context.Context, key string, data []byte, ttl time.Duration) error {
	if err := errors.Join(state.CheckTicket(key, data, ttl), b.open("put ticket")); err != nil {
		return err
	}
	if err := b.c.Set(ctx, b.key("ticket", key), data, ttl).Err(); err != nil {
		return b.fail(ctx, "put ticket", err)
	}
	return nil
}

// GetTicket implements state.Tickets.
func (b *Backend) GetTicket(ctx context.Context, key string) ([]byte, bool, error) {
	return b.ticket(ctx, "get ticket", key, false)
}

// TakeTicket implements state.Tickets: GETDEL, one step on the server.
func (b *Backend) TakeTicket(ctx context.Context, key string) ([]byte, bool, error) {
	return b.ticket(ctx, "take ticket", key, true)
}

func (b *Backend) ticket(ctx context.Context, op, key string, take bool) ([]byte, bool, error) {
	if err := errors.Join(state.CheckKey("ticket key", key), b.open(op)); err != nil {
		return nil, false, err
	}
	k := b.key("ticket", key)
	var cmd *goredis.StringCmd
	if take {
		cmd = b.c.GetDel(ctx, k)
	} else {
		cmd = b.c.Get(ctx, k)
	}
	data, err := cmd.Bytes()
	switch {
	case errors.Is(err, goredis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, b.fail(ctx, op, err)
	}
	return data, true, nil
}
