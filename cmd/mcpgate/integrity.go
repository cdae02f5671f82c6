package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/audit"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/integrity"
	"github.com/mcpgate/mcpgate/internal/metrics"
	"github.com/mcpgate/mcpgate/internal/store"
)

// integrityAuditTimeout bounds the write of one integrity audit entry.
const integrityAuditTimeout = 5 * time.Second

// newKeeper builds tool integrity's keeper on the store: each event is an
// audit entry (integrity.*, with the diff and findings), a count of
// mcpgate_integrity_changes_total, and a record for every audit exporter.
// The config was validated, so its patterns compile.
func newKeeper(cfg *config.Config, st store.Store, exporters []*audit.Exporter, m *metrics.Metrics, log *slog.Logger) (*integrity.Keeper, error) {
	sc, err := scannerOf(cfg)
	if err != nil {
		return nil, err
	}
	record := func(ctx context.Context, e integrity.Event) {
		m.IntegrityChange(e.Server, e.Kind, strings.TrimPrefix(e.Action, "integrity."))
		detail, err := json.Marshal(e)
		if err != nil {
			return
		}
		target := e.Server + "/" + e.Name
		// The review of a list is under way: the entry is written now, in
		// the walk's own time bound, and a store that does not answer
		// loses only the entry (logged), never the decision.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), integrityAuditTimeout)
		_, err = st.AppendAudit(actx, store.AuditEntry{Time: e.Time, Actor: e.Actor, Action: e.Action, Target: target, Detail: detail})
		cancel()
		if err != nil {
			log.Warn("integrity: could not write the audit entry", "action", e.Action, "server", e.Server, "name", e.Name, "error", err)
		}
		for _, x := range exporters {
			x.Export(audit.Entry{ToolCall: store.ToolCall{Time: e.Time, Server: e.Server, Tool: e.Name},
				Event: &audit.Event{Action: e.Action, Actor: e.Actor, Target: target, Detail: detail}})
		}
	}
	return integrity.New(integrity.Options{Store: st, Scanner: sc, Record: record, Separator: cfg.ToolNameSeparator, Logger: log}), nil
}

// scannerOf is the scanner with cfg's integrity.patterns.
func scannerOf(cfg *config.Config) (*integrity.Scanner, error) {
	var pats []integrity.Pattern
	for _, p := range cfg.IntegrityPatterns() {
		pats = append(pats, integrity.Pattern{Name: p.Name, Match: p.Match, Severity: p.Severity})
	}
	return integrity.NewScanner(pats)
}

// applyIntegrity gives the keeper next's patterns (a reload).
func applyIntegrity(k *integrity.Keeper, next *config.Config) error {
	sc, err := scannerOf(next)
	if err != nil {
		return err
	}
	k.SetScanner(sc)
	return nil
}

// integrityChanged reports whether a reload changes tool integrity's
// settings, top level or per server.
func integrityChanged(cur, next *config.Config) bool {
	if !reflect.DeepEqual(cur.Integrity, next.Integrity) {
		return true
	}
	for name, s := range next.Servers {
		if c := cur.Servers[name]; c != nil && !reflect.DeepEqual(c.Integrity, s.Integrity) {
			return true
		}
	}
	return false
}
