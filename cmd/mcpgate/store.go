package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/store"
	"github.com/mcpgate/mcpgate/internal/store/postgres"
	"github.com/mcpgate/mcpgate/internal/store/sqlite"
)

// openStore opens the store backend cfg.Store names: the embedded SQLite
// store in cfg.DataDir (the default), or a PostgreSQL database. Both
// migrate their schema and refuse one a newer mcpgate wrote. Neither the
// error nor the log line holds the DSN: the postgres store names its
// server as user@host:port/database.
func openStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (store.Store, error) {
	switch cfg.Store.Driver {
	case config.StorePostgres:
		st, err := postgres.Open(ctx, cfg.Store.DSN, postgres.Options{})
		if err != nil {
			return nil, err // "open store postgres user@host:port/db: ..."
		}
		log.Info("store opened", "driver", config.StorePostgres, "database", st.String())
		return st, nil
	default:
		st, err := sqlite.Open(ctx, cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("open the store in %s: %w", cfg.DataDir, err)
		}
		log.Debug("store opened", "driver", config.StoreSQLite, "path", st.Path())
		return st, nil
	}
}
