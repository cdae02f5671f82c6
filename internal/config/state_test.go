package config

import (
	"strings"
	"testing"
)

func TestParseState(t *testing.T) {
	env := envOf(map[string]string{"MCPGATE_REDIS_URL": "redis://:s3cr3t@redis.internal:6379/2"})
	for _, tc := range []struct {
		doc, driver, url string
	}{
		{"servers: {}\n", "memory", ""},
		{"state: {}\n", "memory", ""},
		{"state:\n", "memory", ""},
		{"state: {driver: memory}\n", "memory", ""},
		{"state: {driver: ' Redis ', url: \"${MCPGATE_REDIS_URL}\"}\n", "redis", "redis://:s3cr3t@redis.internal:6379/2"},
		{"state: {driver: redis, url: 'unix:///run/redis/redis.sock?db=1'}\n", "redis", "unix:///run/redis/redis.sock?db=1"},
		{"state: {driver: redis, url: 'rediss://u:p@[::1]:6380'}\n", "redis", "rediss://u:p@[::1]:6380"},
	} {
		c, err := Parse([]byte(tc.doc), "", env)
		if err != nil {
			t.Errorf("%q: %v", tc.doc, err)
			continue
		}
		if c.State.Driver != tc.driver || c.State.URL != tc.url || c.State.DriverOrDefault() != tc.driver {
			t.Errorf("%q: state %+v, want driver %s url %q", tc.doc, c.State, tc.driver, tc.url)
		}
	}
	if (State{}).DriverOrDefault() != StateMemory {
		t.Error("the zero State is not the memory driver")
	}
	c, err := Parse([]byte("state: {driver: redis, url: 'unix:///x.sock', replicas: 3}\n"), "", env)
	if err != nil || c.State.Replicas != 3 || c.State.ReplicasOrDefault() != 3 {
		t.Errorf("replicas: 3: %+v, %v", c, err)
	}
	if (State{}).ReplicasOrDefault() != 1 {
		t.Error("the zero State does not assume one replica")
	}
}

func TestParseStateErrors(t *testing.T) {
	env := envOf(map[string]string{"MCPGATE_REDIS_URL": "http://:s3cr3t@redis.internal"})
	for _, tc := range []struct{ doc, want string }{
		{"state: {driver: redis}\n", "state.url: required for driver redis"},
		{"state: {driver: redis, url: '  '}\n", "state.url: required for driver redis"},
		{"state: {driver: etcd}\n", `state.driver: must be one of memory, redis (got "etcd")`},
		{"state: {driver: ''}\n", "state.driver: must be one of memory, redis"},
		{"state: {url: 'redis://localhost'}\n", "state.url: not allowed for driver memory"},
		{"state: {driver: redis, url: '${MCPGATE_REDIS_URL}'}\n", "state.url: scheme must be redis, rediss or unix"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@/0'}\n", "state.url: needs a host"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@h:port'}\n", "state.url: must be a URL"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@h/db'}\n", "state.url: path must be a database number"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@h/0#x'}\n", "state.url: must not have a fragment"},
		{"state: {driver: redis, url: 'unix://:s3cr3t@host/x.sock'}\n", "state.url: needs the socket's absolute path"},
		{"state: {driver: redis, url: 'unix:relative.sock'}\n", "state.url: must be a URL"},
		{"state: {driver: redis, url: 's3cr3t'}\n", "state.url: scheme must be"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@h', password: x}\n", "state.password"},
		{"state: {driver: redis, url: 'redis://:s3cr3t@h', replicas: 0}\n", "state.replicas"},
	} {
		_, err := Parse([]byte(tc.doc), "", env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.doc, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%q: the error echoes the URL: %v", tc.doc, err)
		}
	}
}

// FuzzRedisURL: checkRedisURL never echoes its input, and what it accepts
// has a redis, rediss or unix scheme and somewhere to connect.
func FuzzRedisURL(f *testing.F) {
	for _, s := range []string{"redis://localhost:6379/0", "rediss://u:p@h", "unix:///x.sock", "redis://:p@/0", "unix:x", "redis://[::1", "http://h", "redis://h/0#f", "REDIS://H"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := checkRedisURL(raw)
		if err != nil {
			// Every message is a constant: none can echo the URL.
			switch err.Error() {
			case "must be a URL: " + redisURLForm, "must not have a fragment (#...)",
				"needs a host: " + redisURLForm, "port must be a number",
				"path must be a database number (/0), or nothing",
				"needs the socket's absolute path: unix:///path/to.sock",
				"scheme must be redis, rediss or unix: " + redisURLForm:
			default:
				t.Fatalf("error %q is not one of the constant messages", err)
			}
			return
		}
		// unix:/path.sock (no authority) is a URL too, and go-redis takes it.
		scheme, rest, _ := strings.Cut(raw, ":")
		switch strings.ToLower(scheme) {
		case "redis", "rediss":
			if !strings.HasPrefix(rest, "//") || len(rest) == 2 {
				t.Fatalf("accepted %q without a host", raw)
			}
		case "unix":
			if !strings.Contains(rest, "/") {
				t.Fatalf("accepted %q without a path", raw)
			}
		default:
			t.Fatalf("accepted scheme %q", scheme)
		}
	})
}
