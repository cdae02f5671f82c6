package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	msqlite "modernc.org/sqlite"
)

// The writer pool's connections are the driver's, wrapped so each owns
// its prepared tool_calls inserts (toolCallInserts): the audit batches run
// them on the driver connection itself, through sql.Conn.Raw, instead of
// through database/sql, whose per-execution argument conversion was the
// largest part of the garbage an audit record made (a []driver.NamedValue
// of every parameter for every execution). A driver statement belongs to
// the connection that prepared it and must be closed before it: the
// wrapper's Close does that, whenever database/sql drops the connection
// (an interrupted statement, an ErrBadConn, Close of the pool), and the
// pool's next connection prepares its own on first use.

// sqliteConn is what database/sql uses of a connection of the driver: a
// wrapper that hid one of these would change its behaviour (see
// msqlite.NewConnector).
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// writerConnector opens the writer pool's connections.
type writerConnector struct{ driver.Connector }

// openWriter opens the writer pool on dsn.
func openWriter(dsn string) (*sql.DB, error) {
	base, err := msqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(writerConnector{base}), nil
}

func (c writerConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(sqliteConn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("sqlite driver connection %T lacks a method database/sql uses", dc)
	}
	return &writerConn{sqliteConn: sc}, nil
}

// writerConn is a connection of the writer pool. Only database/sql's
// holder of the connection uses it (inside sql.Conn.Raw, or database/sql
// itself), one goroutine at a time.
type writerConn struct {
	sqliteConn
	calls toolCallInserts
}

var _ sqliteConn = (*writerConn)(nil)

// Unwrap lets the driver's functions on a sql.Conn (msqlite.Limit) see the
// driver's connection.
func (c *writerConn) Unwrap() driver.Conn { return c.sqliteConn }

// Close closes the connection's own statements, then the connection.
func (c *writerConn) Close() error {
	err := c.calls.close()
	return errors.Join(err, c.sqliteConn.Close())
}

// withWriter runs f on the writer pool's connection. f's error is
// returned as it is; with drop true, the pool discards the connection
// after f (its next one opens with the DSN's settings).
func (s *Store) withWriter(ctx context.Context, f func(c *writerConn) (drop bool, err error)) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var ferr error
	rerr := conn.Raw(func(dc any) error {
		wc, ok := dc.(*writerConn)
		if !ok {
			ferr = fmt.Errorf("writer connection is a %T", dc)
			return nil
		}
		var drop bool
		if drop, ferr = f(wc); drop {
			return driver.ErrBadConn
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	if errors.Is(rerr, driver.ErrBadConn) {
		return nil // f's work is done; only the connection goes
	}
	return rerr
}
