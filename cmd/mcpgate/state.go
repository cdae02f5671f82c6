package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/state"
	"github.com/mcpgate/mcpgate/internal/state/redis"
)

// statePingTimeout bounds the startup check of a shared state backend.
const statePingTimeout = 2 * time.Second

// openState builds the shared-state backend the config names (SPEC S15):
// memory for one process, Redis for a fleet. An unreachable Redis is a
// warning, not an error: a replica starting during an outage still
// serves, and the state's callers fall back while it is unavailable.
func openState(ctx context.Context, c config.State, log *slog.Logger) (state.Backend, error) {
	if c.DriverOrDefault() != config.StateRedis {
		return state.NewMemory(state.MemoryOptions{}), nil
	}
	b, err := redis.Open(redis.Options{URL: c.URL})
	if err != nil {
		return nil, fmt.Errorf("state.url: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, statePingTimeout)
	defer cancel()
	if err := b.Ping(pctx); err != nil {
		log.Warn("shared state unreachable; serving, with replica-local fallbacks, until it answers", "driver", b.Name(), "error", err)
	} else {
		log.Info("shared state", "driver", b.Name())
	}
	return b, nil
}
