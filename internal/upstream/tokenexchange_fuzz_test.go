package upstream

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mcpgate/mcpgate/internal/config"
)

type bodyTransport struct {
	status int
	body   []byte
}

func (b bodyTransport) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: b.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b.body))}, nil
}

// FuzzExchangeResponse feeds arbitrary token endpoint answers to the token
// response parser of the exchanges (post): it never panics, a granted
// token is fit for a header, and no error echoes the subject token or the
// client secret, whatever the body quotes.
func FuzzExchangeResponse(f *testing.F) {
	const subject, secret = "subject-token-0123456789abcdef", "client-secret-0123456789"
	for _, seed := range []string{
		`{"access_token":"a","token_type":"Bearer","expires_in":60}`,
		`{"access_token":"j","issued_token_type":"urn:ietf:params:oauth:token-type:id-jag","token_type":"N_A"}`,
		`{"access_token":"a","issued_token_type":"urn:ietf:params:oauth:token-type:jwt"}`,
		`{"error":"invalid_grant","error_description":"subject-token-0123456789abcdef is expired"}`,
		`{"error":"invalid_client","error_description":"client-secret-0123456789"}`,
		`{"access_token":"a","token_type":"subject-token-0123456789abcdef"}`,
		`{"access_token":"a\nb"}`, `{"expires_in":"1e400","access_token":"x"}`, `[]`, ``,
	} {
		f.Add(200, []byte(seed), false)
		f.Add(400, []byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, status int, body []byte, jag bool) {
		if status < 100 || status > 599 {
			status = 200
		}
		a := &config.Auth{Type: config.AuthTokenExchange, TokenURL: "https://sts.example/token", ClientID: "gw", ClientSecret: secret}
		s := newTokenSource("up", "https://up.example/mcp", a, &http.Client{Transport: bodyTransport{status, body}}, nil)
		issued := ""
		if jag {
			issued = config.TokenTypeIDJAG
		}
		tok, ttl, err := s.post(context.Background(), a.TokenURL, a.TokenURL, url.Values{"subject_token": {subject}}, issued, subject)
		if err != nil {
			if msg := err.Error(); strings.Contains(msg, subject) || strings.Contains(msg, secret) {
				t.Fatalf("error echoes a secret: %q", msg)
			}
			return
		}
		if tok == "" || !validTokenChars(tok) || ttl <= 0 {
			t.Fatalf("granted %q for %v", tok, ttl)
		}
	})
}
