package config

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func TestParseFleet(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{0xfb}, 32)
	env := map[string]string{
		"MCPGATE_SESSION_KEY":     base64.StdEncoding.EncodeToString(k1),
		"MCPGATE_SESSION_KEY_OLD": base64.RawURLEncoding.EncodeToString(k2),
	}
	doc := `fleet: {session_keys: ["${MCPGATE_SESSION_KEY}", "${MCPGATE_SESSION_KEY_OLD}"], advertise: "http://10.0.0.5:4000"}` + "\n"
	c, err := Parse([]byte(doc), "", envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if c.Fleet == nil || c.Fleet.Advertise != "http://10.0.0.5:4000" {
		t.Fatalf("fleet %+v", c.Fleet)
	}
	keys, err := c.Fleet.SessionKeyBytes()
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], k1) || !bytes.Equal(keys[1], k2) {
		t.Fatalf("keys %x, %v", keys, err)
	}
	if c, err := Parse([]byte("servers: {}\n"), "", nil); err != nil || c.Fleet != nil {
		t.Errorf("no fleet block: %+v, %v", c.Fleet, err)
	}
	if keys, err := (*Fleet)(nil).SessionKeyBytes(); keys != nil || err != nil {
		t.Errorf("nil fleet: %v, %v", keys, err)
	}
	// The resume knobs' defaults, and set.
	if c.Fleet.ResumeEvents != DefaultResumeEvents || c.Fleet.ResumeTTL != DefaultResumeTTL || c.Fleet.ResumeWindow != DefaultResumeWindow {
		t.Errorf("resume defaults: %+v", c.Fleet)
	}
	c, err = Parse([]byte("fleet: {resume_events: 50, resume_ttl: 1m, resume_window: 5s}\n"), "", nil)
	if err != nil || c.Fleet.ResumeEvents != 50 || c.Fleet.ResumeTTL != time.Minute || c.Fleet.ResumeWindow != 5*time.Second {
		t.Errorf("resume knobs: %+v, %v", c.Fleet, err)
	}
}

func TestParseFleetErrors(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	tests := []struct{ name, doc, want string }{
		{"unset variable", "fleet: {session_keys: ['${NOPE}']}\n", "fleet.session_keys[0]: environment variable NOPE is not set"},
		{"empty", "fleet: {session_keys: [' ']}\n", "fleet.session_keys[0]: must not be empty"},
		{"short key", "fleet: {session_keys: [" + short + "]}\n", "fleet.session_keys[0]: must be 32 bytes, base64-encoded (got 16 bytes"},
		{"not base64", "fleet: {session_keys: ['not-base64!!']}\n", "fleet.session_keys[0]: must be 32 bytes, base64-encoded (not valid base64"},
		{"duplicate", "fleet: {session_keys: [" + good + ", " + good + "]}\n", "fleet.session_keys[1]: same key as session_keys[0]"},
		{"advertise not a URL", "fleet: {advertise: '10.0.0.5:4000'}\n", "fleet.advertise: must be an http or https URL"},
		{"unknown field", "fleet: {session_key: " + good + "}\n", "fleet.session_key"},
		{"resume buffer too large", "fleet: {resume_events: 100001}\n", "fleet.resume_events: must be at most 100000"},
		{"resume buffer empty", "fleet: {resume_events: 0}\n", "fleet.resume_events"},
		{"resume window zero", "fleet: {resume_window: 0s}\n", "fleet.resume_window"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "", envOf(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// A session key never appears in a message, whatever is wrong with it.
func TestSessionKeyNeverEchoed(t *testing.T) {
	for _, secret := range []string{"hunter2-hunter2-hunter2", base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))} {
		for _, doc := range []string{
			"fleet: {session_keys: ['" + secret + "']}\n",
			"fleet: {session_keys: [['" + secret + "']]}\n",
			"fleet: {session_keys: '" + secret + "'}\n",
		} {
			_, err := Parse([]byte(doc), "", envOf(nil))
			if err == nil {
				t.Fatalf("%s accepted", doc)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the key is echoed: %v", err)
			}
		}
	}
}
