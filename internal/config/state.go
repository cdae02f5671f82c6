package config

import (
	"errors"
	"net/url"
	"strings"
)

// Where the replicas' shared state lives (SPEC S15, DESIGN decision 5):
// internal/state is the contract and the memory backend, state/redis the
// fleet's; cmd/mcpgate builds the one named here. This file only says
// which, and that a Redis URL is well formed.

// State drivers.
const (
	StateMemory = "memory"
	StateRedis  = "redis"
)

// State chooses the shared-state backend. The zero value is the memory
// driver.
type State struct {
	Driver   string `config:"driver,default=memory,enum=memory|redis,disc=driver,trim,lower" doc:"memory: this process only (one gateway). redis: shared by every replica of a fleet: session state, rate limits, what each key spent of its budget, the replica registry, stream owners, resumable event buffers, leases, the pending steps of browser logins and connects, and the announcements of terminations and admin changes (docs/fleet.md)."`
	URL      string `config:"url,required,when=redis,expand,trim,secret" doc:"The Redis server (7.0 or later): redis://[user:password@]host[:port][/db], rediss://... for TLS, or unix:///path/to.sock[?db=N]; go-redis query options (dial_timeout, pool_size, ...) apply. Usually ${MCPGATE_REDIS_URL}, as it may carry a password."`
	Replicas int    `config:"replicas,default=1,min=1" doc:"How many replicas the fleet runs, for the rate limits' fallback: while Redis is unreachable each replica enforces every rate limit divided by this on its own (so the fleet still allows about the limit), says so in a warning and in mcpgate_ratelimit_degraded, and asks Redis again every second. In a fleet (fleet.session_keys and fleet.advertise) the number of replicas the replica registry last listed as live is used instead when it is larger; a smaller listing is not trusted, as replicas that have not renewed since they or Redis (re)started are missing from it. 1 (the default): each replica keeps the whole limit during an outage, so the fleet may allow up to N times it. Ignored by the memory driver."`
}

// ReplicasOrDefault is Replicas, 1 when unset.
func (s State) ReplicasOrDefault() int { return max(s.Replicas, 1) }

// DriverOrDefault is the driver, memory when unset.
func (s State) DriverOrDefault() string {
	if s.Driver == "" {
		return StateMemory
	}
	return s.Driver
}

func (s *State) validate(errs *errorList) {
	if s.Driver != StateRedis || strings.TrimSpace(s.URL) == "" {
		return // checkFields reports a missing url
	}
	if err := checkRedisURL(s.URL); err != nil {
		errs.add("state.url", 0, "%s", err.Error())
	}
}

const redisURLForm = "redis://[user:password@]host[:port][/db], rediss://... or unix:///path/to.sock"

// checkRedisURL checks the shape of a Redis URL; go-redis checks its query
// options when the backend is built. The error never quotes raw.
func checkRedisURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		return errors.New("must be a URL: " + redisURLForm)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return errors.New("must not have a fragment (#...)")
	}
	switch u.Scheme {
	case "redis", "rediss":
		if u.Hostname() == "" {
			return errors.New("needs a host: " + redisURLForm)
		}
		if p := u.Port(); p != "" && !allDigits(p) {
			return errors.New("port must be a number")
		}
		if db := strings.TrimPrefix(u.Path, "/"); db != "" && !allDigits(db) {
			return errors.New("path must be a database number (/0), or nothing")
		}
	case "unix":
		if u.Host != "" || u.Path == "" || u.Path == "/" {
			return errors.New("needs the socket's absolute path: unix:///path/to.sock")
		}
	default:
		return errors.New("scheme must be redis, rediss or unix: " + redisURLForm)
	}
	return nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
