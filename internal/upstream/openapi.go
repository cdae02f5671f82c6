package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/openapi"
)

// openapiSession is an HTTP API described by an OpenAPI document, spoken
// to as an MCP server (SPEC C12): initialize is synthesised (the tools
// capability), tools/list is the document's operations, tools/call an
// HTTP request sent with the server's egress credentials (C3) and
// redirect rule (C4). Nothing is kept upstream between calls: like a
// stateless server, it is Done only when closed. Safe for concurrent use.
type openapiSession struct {
	http httpBase
	doc  *openapi.Doc
	base *url.URL
	info *InitInfo

	closeOnce sync.Once
	done      chan struct{}
}

var _ Session = (*openapiSession)(nil)

// dialOpenAPI loads the server's document and builds its session. ctx
// bounds the loading of the document.
func dialOpenAPI(ctx context.Context, opts *Options) (Session, error) {
	srv := opts.Server
	fail := func(kind Kind, err error) error { return &Error{Server: srv.Name, Kind: kind, Err: err} }
	doc, err := loadSpec(ctx, srv.Spec, srv.Timeout)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fail(KindUnreachable, err)
	}
	if o := srv.Operations; o != nil {
		doc = doc.Select(o.Include, o.Exclude)
	}
	base, err := openapiBase(srv, doc)
	if err != nil {
		return nil, fail(KindInternal, err)
	}
	eff := openapiEgress(srv, doc, base)
	o := *opts
	o.Server = eff
	if srv.BaseURL == "" && config.IsSpecURL(srv.Spec) && o.HTTPClient == nil {
		// The document chose where its requests go (its own origin):
		// they are dialled as its fetch was, never through a proxy.
		if o.HTTPClient, err = docClient(eff, base); err != nil {
			return nil, fail(KindInternal, err)
		}
	}
	c := newConn(&o)
	b, err := newHTTPBase(c, &o)
	if err != nil {
		c.Close()
		return nil, err
	}
	// Every request through Client.Do, whose redirect policy then judges
	// the first redirect: the package's fast path (httpBase.send) would
	// send the request again to follow one, and an operation is not
	// necessarily idempotent.
	if b.redirects != nil {
		b.client, b.redirects = b.redirects, nil
	} else {
		hc := *b.client
		b.client = &hc
	}
	s := &openapiSession{http: b, doc: doc, base: base, done: make(chan struct{})}
	s.info = s.synthInfo()
	return s, nil
}

// openapiBase is where srv's requests go: its base_url, else what the
// document says (openapi.Doc.Base: a fetched document's own origin only).
// A document read from a file is pinned to the origin it first named
// (pinBase), so a changed file cannot move the requests elsewhere either.
func openapiBase(srv *config.Server, doc *openapi.Doc) (*url.URL, error) {
	if srv.BaseURL != "" {
		base, err := url.Parse(srv.BaseURL)
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			return nil, errors.New("openapi: base_url must be an http or https URL")
		}
		return base, nil
	}
	base, err := doc.Base()
	if err != nil {
		return nil, err
	}
	if !config.IsSpecURL(srv.Spec) {
		if err := pinBase(srv.Spec, base); err != nil {
			return nil, err
		}
	}
	return base, nil
}

// openapiEgress is the server as its requests see it: URL is the API's
// base (for the credential's resource and the redirect rules), and an
// api_key credential goes where the document's security scheme puts it
// (its header, or Authorization with the scheme it names: "ApiKey
// <secret>", exactly one scheme, C3.2) unless header_name says otherwise.
func openapiEgress(srv *config.Server, doc *openapi.Doc, base *url.URL) *config.Server {
	eff := *srv
	eff.URL = base.String()
	if a := srv.Auth; a != nil && a.Type == config.AuthAPIKey && a.HeaderName == "" {
		if slot, ok := doc.APIKeySlot(); ok {
			au := *a
			if slot.Scheme == "" {
				au.HeaderName = slot.Header
			} else {
				au.Type = config.AuthAuthorization
				au.Value = slot.Scheme + " " + StripScheme(strings.TrimSpace(a.Value), slot.Scheme)
				if slot.Header != headerAuthorization {
					au.HeaderName = slot.Header
				}
			}
			eff.Auth = &au
		}
	}
	return &eff
}

// synthInfo is the initialize result the document stands for.
func (s *openapiSession) synthInfo() *InitInfo {
	name := s.doc.Title()
	if name == "" {
		name = s.http.c.server
	}
	si, _ := json.Marshal(map[string]string{"name": name, "version": s.doc.Version()})
	caps := json.RawMessage(`{"tools":{}}`)
	res := map[string]any{"protocolVersion": mcpwire.LatestHandshake, "capabilities": caps, "serverInfo": json.RawMessage(si)}
	instr := strings.TrimSpace(s.doc.Description())
	if instr != "" {
		res["instructions"] = instr
	}
	raw, _ := json.Marshal(res)
	return &InitInfo{
		ProtocolVersion: mcpwire.LatestHandshake,
		Capabilities:    caps,
		Caps:            mcpwire.ParseServerCaps(caps),
		ServerInfo:      si,
		Instructions:    instr,
		HasInstructions: instr != "",
		Result:          raw,
	}
}

func (s *openapiSession) Info() *InitInfo       { return s.info }
func (s *openapiSession) Done() <-chan struct{} { return s.done }

func (s *openapiSession) Err() error {
	select {
	case <-s.done:
		return &Error{Server: s.http.c.server, Kind: KindClosed, Err: errors.New("session closed")}
	default:
		return nil
	}
}

func (s *openapiSession) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		s.http.c.Close()
	})
	return nil
}

// Notify drops notifications: an HTTP API has no use for them.
func (s *openapiSession) Notify(context.Context, string, json.RawMessage) error {
	if err := s.Err(); err != nil {
		return err
	}
	return nil
}

// Call answers ping, tools/list and tools/call; any other method is not
// found, as for an MCP server with only the tools capability.
func (s *openapiSession) Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	if err := s.Err(); err != nil {
		return nil, err
	}
	switch method {
	case mcpwire.MethodPing:
		return json.RawMessage(`{}`), nil
	case mcpwire.MethodToolsList:
		return s.list(), nil
	case mcpwire.MethodToolsCall:
		return s.call(ctx, params)
	}
	return nil, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, "method not found: %s", method)
}

func (s *openapiSession) list() json.RawMessage {
	type tool struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	}
	ts := s.doc.Tools()
	out := struct {
		Tools []tool `json:"tools"`
	}{Tools: make([]tool, 0, len(ts))}
	for _, t := range ts {
		out.Tools = append(out.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema})
	}
	raw, _ := json.Marshal(out)
	return raw
}

func (s *openapiSession) call(ctx context.Context, params json.RawMessage) (json.RawMessage, error) {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "invalid tools/call params")
	}
	t := s.doc.Tool(p.Name)
	if t == nil {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "unknown tool %q", p.Name)
	}
	r, err := t.Request(s.base, p.Arguments)
	if err != nil {
		var ae *openapi.ArgumentError
		if errors.As(err, &ae) {
			return openapi.ErrorResult(ae.Msg), nil
		}
		return nil, &Error{Server: s.http.c.server, Kind: KindInternal, Err: err}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.http.c.timeout)
	defer cancel()
	req, err := s.http.newRequest(ctx, r.Method, r.URL.String(), r.Body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.Header {
		req.Header[k] = v
	}
	resp, err := s.http.do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return nil, &Error{Server: s.http.c.server, Kind: KindTimeout, Err: fmt.Errorf("%s %s: no response within %s", r.Method, redactURL(r.URL.String()), s.http.c.timeout)}
		}
		var re *redirectError
		if errors.As(err, &re) {
			// The destination was never contacted (C4.2): say so to the model.
			return openapi.ErrorResult(re.Error()), nil
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := s.http.readBody(resp, s.http.c.maxMsg)
	if err != nil {
		return nil, err
	}
	body = scrubSecrets(body, req.Header, s.http.auth)
	return t.Result(openapi.Response{
		Status:      resp.StatusCode,
		ContentType: resp.Header.Get(headerContentType),
		Body:        body,
		URI:         redactURL(r.URL.String()),
	}), nil
}

// scrubSecrets replaces the credentials sent with a request wherever the
// response repeats them (an API that echoes its request's headers), so a
// result or error excerpt never carries them.
func scrubSecrets(body []byte, sent http.Header, a *egressAuth) []byte {
	var secrets []string
	for _, h := range a.slots() {
		for _, v := range sent.Values(h) {
			secrets = append(secrets, v)
			if _, rest, ok := strings.Cut(v, " "); ok {
				secrets = append(secrets, strings.TrimSpace(rest))
			}
		}
	}
	for _, sec := range secrets {
		if len(sec) < 4 {
			continue // too short to tell from ordinary text
		}
		body = []byte(strings.ReplaceAll(string(body), sec, "[REDACTED]"))
	}
	return body
}
