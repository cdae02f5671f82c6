package config

import "time"

// Audit says how tool-call records reach the store (SPEC S16.3).
type Audit struct {
	Durable *bool         `config:"durable" doc:"A tool call's answer waits until its audit record is committed to the store; the records of concurrent calls share one transaction. A crash (SIGKILL, power loss) then loses no record of an answered call, at the cost of one commit on the reply's path (see docs/benchmarks.md). Off: records are written in batches at least every 200 ms, and a crash can lose the last ones. Default: on with store.driver postgres (a fleet: SPEC S15 promises that a killed replica loses no acknowledged record), off with the embedded SQLite store."`
	Timeout time.Duration `config:"durable_timeout,positive" doc:"With durable: how long (default 5s) an answer waits for its record's commit; past it the answer goes out, the record stays queued (written once the store takes it) and mcpgate_audit_unconfirmed_total counts it."`
}

// DurableFor reports whether records are durable for a config whose
// store driver is driver (the default depends on it).
func (a Audit) DurableFor(driver string) bool {
	if a.Durable != nil {
		return *a.Durable
	}
	return driver == StorePostgres
}

// TimeoutOrDefault is Timeout, 5s when unset.
func (a Audit) TimeoutOrDefault() time.Duration {
	if a.Timeout <= 0 {
		return 5 * time.Second
	}
	return a.Timeout
}
