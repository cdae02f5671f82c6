package guard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

func TestCheckWebhookURL(t *testing.T) {
	for u, ok := range map[string]bool{
		"https://g.example.com/x": true, "http://127.0.0.1:8080/x": true, "http://localhost/x": true, "http://[::1]/x": true,
		"http://g.example.com/x": false, "http://10.0.0.1/x": false, "ftp://127.0.0.1/": false, "/relative": false, "": false,
	} {
		if err := CheckWebhookURL(u); (err == nil) != ok {
			t.Errorf("CheckWebhookURL(%q) = %v", u, err)
		}
	}
}

// A service's answer decides; a redirect is not followed, an answer too
// large or not an object rewrite is a failure or a block, never a guess.
func TestWebhookAnswers(t *testing.T) {
	answers := map[string]func(w http.ResponseWriter){
		"redirect": func(w http.ResponseWriter) {
			w.Header().Set("Location", "https://elsewhere.example.com/")
			w.WriteHeader(http.StatusFound)
		},
		"huge": func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"allow":true,"reason":"%s"}`, strings.Repeat("x", MaxWebhookAnswer))
		},
		"no-allow": func(w http.ResponseWriter) { fmt.Fprint(w, `{"reason":"?"}`) },
		"bad-rw":   func(w http.ResponseWriter) { fmt.Fprint(w, `{"allow":true,"redacted":"just text"}`) },
		"rewrite":  func(w http.ResponseWriter) { fmt.Fprint(w, `{"allow":true,"redacted":{"q":"clean"}}`) },
		"long-note": func(w http.ResponseWriter) {
			fmt.Fprintf(w, `{"allow":false,"reason":"%s\n%s"}`, strings.Repeat("r", 300), "x")
		},
	}
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req webhookRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		answers[req.Tool](w)
	}))
	defer svc.Close()
	set := Compile(&config.Guardrails{Pre: []config.Guardrail{{Kind: config.GuardWebhook, Name: "hook", URL: svc.URL}}})
	for _, tt := range []struct {
		tool, blocked, args string
	}{
		{"redirect", "guardrail service unavailable", `{"q":1}`},
		{"huge", "guardrail service unavailable", `{"q":1}`},
		{"no-allow", "guardrail service unavailable", `{"q":1}`},
		{"bad-rw", "guardrail service sent an unusable rewrite", `{"q":1}`},
		{"rewrite", "", `{"q":"clean"}`},
		{"long-note", strings.Repeat("r", 200) + "...", `{"q":1}`},
	} {
		out, rep := Chain{set}.Pre(context.Background(), Call{Server: "s", Tool: tt.tool}, json.RawMessage(`{"q":1}`))
		got := ""
		if rep.Block != nil {
			got = rep.Block.Reason
		}
		if got != tt.blocked || string(out) != tt.args {
			t.Errorf("%s: block %q args %s, want %q %s", tt.tool, got, out, tt.blocked, tt.args)
		}
	}
}
