package config

import (
	"bytes"
	"strings"
	"time"
)

// A fleet of replicas serving one set of clients (SPEC S15): the keys
// their sealed session ids and requestState values are sealed under, so
// that any replica opens what another issued. internal/fleet owns the
// sealing; this file only says which keys there are and that each is
// well formed.

// Fleet configures the replicas of one fleet; nil means the file has no
// fleet block (a single replica: session ids stay process-local).
type Fleet struct {
	// SessionKeys: the first seals, every one opens. Each decodes like a
	// vault key (DecodeVaultKey).
	SessionKeys []string `config:"session_keys,expand,trim,secret" doc:"The keys session ids and requestState values are sealed under, newest first: the first seals, every one opens, so a session started on one replica continues on any other (and after a restart). 32 random bytes each, in base64 (standard or URL alphabet, padded or not), usually from the environment: ${MCPGATE_SESSION_KEY}; every replica of the fleet needs the same list. To rotate, put a new key first on every replica, then remove the old one once the sessions it sealed are over. Empty: session ids stay local to the process that issued them."`
	// Advertise is how the other replicas reach this one ("" = not said).
	Advertise string `config:"advertise,expand,trim" doc:"This replica's base URL as the other replicas reach it directly (http or https, e.g. http://10.0.0.5:4000; no path). With session_keys and the redis state driver, the replica registers it in the replica registry, and the other replicas forward there what belongs to this one: a client's reply to a request this replica sent, and the retry of a 2026-07-28 call it runs. Unset: the replica stays out of the registry, and such messages fail when they reach another replica."`
	// Resumable streams (SPEC S15, C9.1): zero values mean the defaults
	// below, for a Config built in code.
	ResumeEvents int           `config:"resume_events,default=1000,min=1" doc:"With session_keys, the last events of each POST SSE stream kept in the shared state, so that a client that lost the connection resumes the stream on any replica with GET and Last-Event-ID. A client further behind than this gets 410 instead of a silent gap."`
	ResumeTTL    time.Duration `config:"resume_ttl,default=5m,positive" doc:"How long a POST SSE stream's buffered events are kept after its last event."`
	ResumeWindow time.Duration `config:"resume_window,default=30s,positive" doc:"With session_keys, a call whose client dropped its POST SSE stream keeps running this long, waiting for a GET with Last-Event-ID on any replica; without one it is cancelled (SPEC C9.1). Without session_keys a disconnect cancels at once."`
}

// Defaults of the resumable streams.
const (
	DefaultResumeEvents = 1000
	DefaultResumeTTL    = 5 * time.Minute
	DefaultResumeWindow = 30 * time.Second
	// maxResumeEvents is state.MaxEventsPerStream (config does not
	// import state).
	maxResumeEvents = 100_000
)

// SessionKeyBytes decodes the session keys, in order. The error never
// quotes a key.
func (f *Fleet) SessionKeyBytes() ([][]byte, error) {
	if f == nil {
		return nil, nil
	}
	out := make([][]byte, 0, len(f.SessionKeys))
	for _, s := range f.SessionKeys {
		b, err := DecodeVaultKey(s)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func (f *Fleet) validate(errs *errorList, strict bool) {
	p := "fleet"
	checkFields(errs, p, f, strict)
	var seen [][]byte
	for i, s := range f.SessionKeys {
		kp := indexPath(p+".session_keys", i)
		if strings.TrimSpace(s) == "" {
			errs.add(kp, 0, "must not be empty (an unset ${VAR}?)")
			continue
		}
		b, err := DecodeVaultKey(s)
		if err != nil {
			errs.add(kp, 0, "%s", err.Error())
			continue
		}
		for j, o := range seen {
			if o != nil && bytes.Equal(o, b) {
				errs.add(kp, 0, "same key as session_keys[%d]", j)
				b = nil
				break
			}
		}
		seen = append(seen, b)
	}
	if f.ResumeEvents > maxResumeEvents {
		errs.add(p+".resume_events", 0, "must be at most %d", maxResumeEvents)
	}
	if f.Advertise != "" && !validURL(f.Advertise) {
		errs.add(p+".advertise", 0, "must be an http or https URL")
	}
}
