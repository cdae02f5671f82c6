package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// Webhook limits.
const (
	DefaultWebhookTimeout = 2 * time.Second
	// MaxWebhookAnswer bounds the service's answer (with a rewritten
	// result in it); a longer one is a failure.
	MaxWebhookAnswer = 4 << 20
	// maxReason bounds the service's reason in the client's error.
	maxReason = 200
)

// webhookClient follows no redirect: the operator named the service, a
// redirect could point the call's payload anywhere.
var webhookClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

type webhook struct {
	url      string
	headers  map[string]string
	timeout  time.Duration
	failOpen bool
}

// CheckWebhookURL accepts https, or http to a loopback host (a sidecar):
// the payload carries arguments and results, so it never travels in
// clear text off the machine.
func CheckWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("not an absolute URL")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if netaddr.IsLoopbackHost(u.Hostname()) {
			return nil
		}
		return errors.New("http only to a loopback host (localhost, 127.0.0.1, ::1); use https")
	}
	return errors.New("scheme must be https (or http to a loopback host)")
}

func newWebhook(g *config.Guardrail) (*webhook, error) {
	if err := CheckWebhookURL(g.URL); err != nil {
		return nil, err
	}
	t := g.Timeout
	if t <= 0 {
		t = DefaultWebhookTimeout
	}
	return &webhook{url: g.URL, headers: g.Headers, timeout: t, failOpen: g.FailOpen}, nil
}

// webhookCaller is the caller in a webhook request.
type webhookCaller struct {
	Alias string `json:"alias,omitempty"`
	User  string `json:"user,omitempty"`
}

// webhookRequest is what the service gets.
type webhookRequest struct {
	Phase     string          `json:"phase"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Caller    webhookCaller   `json:"caller"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
}

// webhookAnswer is what the service answers. Redacted, when present,
// replaces the arguments (pre) or the result (post).
type webhookAnswer struct {
	Allow    *bool           `json:"allow"`
	Reason   string          `json:"reason"`
	Redacted json.RawMessage `json:"redacted"`
}

// check asks the service; a failure blocks unless fail_open.
func (w *webhook) check(ctx context.Context, c *check, phase string, call Call, payload json.RawMessage, rep *Report) json.RawMessage {
	req := webhookRequest{Phase: phase, Server: call.Server, Tool: call.Tool, Caller: webhookCaller{call.Alias, call.User}}
	if phase == PhasePre {
		req.Arguments = payload
	} else {
		req.Result = payload
	}
	ans, err := w.post(ctx, req)
	if err != nil {
		if w.failOpen {
			rep.Failed = append(rep.Failed, c.name)
			return payload
		}
		c.block(phase, "guardrail service unavailable", rep)
		return payload
	}
	if !*ans.Allow {
		c.block(phase, safeReason(ans.Reason), rep)
		return payload
	}
	if r := bytes.TrimSpace(ans.Redacted); len(r) > 0 && string(r) != "null" {
		// Arguments and results are JSON objects; anything else would
		// break the call, so the service's rewrite is refused.
		if v, ok := decode(r); ok {
			if _, isObj := v.(map[string]any); isObj {
				rep.redacted(c.name, 1)
				return r
			}
		}
		c.block(phase, "guardrail service sent an unusable rewrite", rep)
	}
	return payload
}

func (w *webhook) post(ctx context.Context, body webhookRequest) (*webhookAnswer, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(b))
	if err != nil {
		return nil, errors.New("bad request")
	}
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := webhookClient.Do(req)
	if err != nil {
		return nil, errors.New("no answer") // url.Error would quote the URL
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("answered %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxWebhookAnswer+1))
	if err != nil {
		return nil, errors.New("answer not read")
	}
	if len(data) > MaxWebhookAnswer {
		return nil, errors.New("answer too large")
	}
	var ans webhookAnswer
	if err := json.Unmarshal(data, &ans); err != nil || ans.Allow == nil {
		return nil, errors.New("answer is not {allow: bool, ...}")
	}
	return &ans, nil
}

// safeReason keeps a service's reason short and on one line.
func safeReason(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxReason {
		s = s[:maxReason] + "..."
	}
	return strings.ToValidUTF8(s, "")
}
