package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Defaults for the zero WebhookOptions fields.
const (
	DefaultWebhookTimeout  = 5 * time.Second
	DefaultWebhookAttempts = 3
)

// WebhookOptions configures a Webhook.
type WebhookOptions struct {
	// URL is the endpoint (operator-configured; it may carry credentials,
	// so no error quotes it).
	URL string
	// Headers go with every request; never logged.
	Headers map[string]string
	// NDJSON sends one object per line (application/x-ndjson) instead of
	// a JSON array (application/json).
	NDJSON bool
	// Timeout bounds one request (DefaultWebhookTimeout).
	Timeout time.Duration
	// Attempts is the most tries per batch (DefaultWebhookAttempts); the
	// wait between two doubles from Backoff (default 200ms).
	Attempts int
	Backoff  time.Duration
	// Client is the HTTP client; nil: a new one. Its CheckRedirect is
	// replaced: a redirect is followed only to the same host.
	Client *http.Client
}

// Webhook is a Sink POSTing each batch to an HTTP endpoint. A 2xx answer
// delivers it; a network error, a timeout, 408, 429 or a 5xx is retried
// (bounded), any other status gives the batch up at once.
type Webhook struct {
	opts   WebhookOptions
	client *http.Client
	buf    bytes.Buffer
}

var _ Sink = (*Webhook)(nil)

// NewWebhook returns a Webhook; it sends nothing until Send.
func NewWebhook(opts WebhookOptions) (*Webhook, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("audit export: webhook url must be an http or https URL")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultWebhookTimeout
	}
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultWebhookAttempts
	}
	if opts.Backoff <= 0 {
		opts.Backoff = 200 * time.Millisecond
	}
	c := &http.Client{}
	if opts.Client != nil {
		*c = *opts.Client
	} else {
		c.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	c.Timeout = 0 // per request, by context
	host := u.Host
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Host != host || len(via) >= 3 {
			return errRedirect
		}
		return nil
	}
	return &Webhook{opts: opts, client: c}, nil
}

var errRedirect = errors.New("redirect to another host, or more than 3, refused")

// statusError is a non-2xx answer.
type statusError struct{ code int }

func (e statusError) Error() string { return fmt.Sprintf("webhook answered %d", e.code) }

func (e statusError) retry() bool {
	return e.code == http.StatusRequestTimeout || e.code == http.StatusTooManyRequests || e.code >= 500
}

// Send POSTs batch, retrying as documented on Webhook.
func (w *Webhook) Send(ctx context.Context, batch []Entry) error {
	body := w.encode(batch)
	if len(body) == 0 {
		return nil
	}
	wait := w.opts.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		err = w.post(ctx, body)
		var se statusError
		if err == nil || errors.As(err, &se) && !se.retry() || attempt >= w.opts.Attempts || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		wait *= 2
	}
	if err != nil {
		return fmt.Errorf("audit export: webhook: %w", err)
	}
	return nil
}

func (w *Webhook) encode(batch []Entry) []byte {
	w.buf.Reset()
	b := w.buf.AvailableBuffer()
	if !w.opts.NDJSON {
		b = append(b, '[')
	}
	n := 0
	for i := range batch {
		start := len(b)
		if n > 0 && !w.opts.NDJSON {
			b = append(b, ',')
		}
		var err error
		if b, err = appendRecord(b, &batch[i]); err != nil {
			b = b[:start]
			continue
		}
		if w.opts.NDJSON {
			b = append(b, '\n')
		}
		n++
	}
	if n == 0 {
		return nil
	}
	if !w.opts.NDJSON {
		b = append(b, ']')
	}
	w.buf.Write(b)
	return w.buf.Bytes()
}

// post sends body once. Its error never carries the URL or the headers.
func (w *Webhook) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.opts.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("bad request") // the URL was checked by NewWebhook
	}
	for k, v := range w.opts.Headers {
		req.Header.Set(k, v)
	}
	if w.opts.NDJSON {
		req.Header.Set("Content-Type", "application/x-ndjson")
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := w.client.Do(req)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the URL
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("no answer within %s", w.opts.Timeout)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError{resp.StatusCode}
	}
	return nil
}

// Flush does nothing: a webhook's batch is delivered when Send returns.
func (w *Webhook) Flush() error { return nil }

// Close releases idle connections.
func (w *Webhook) Close() error {
	w.client.CloseIdleConnections()
	return nil
}
