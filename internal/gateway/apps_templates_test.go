package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpgate/mcpgate/internal/catalog"
	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
)

// templateUpstream is a go-sdk server with ui:// resource templates (and
// others): each read answers "<server> <uri asked for>" under the URI
// asked for, with the view's own _meta.ui; each completion answers
// "<server> <ref uri>"; subscriptions are recorded.
type templateUpstream struct {
	*sdkUpstream
	mu   sync.Mutex
	subs []string // URIs subscribed to, in order
}

func (u *templateUpstream) subscribed() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.subs)
}

// viewMeta is the _meta.ui of server's views and view templates.
func viewMeta(server string) mcp.Meta {
	return mcp.Meta{"ui": map[string]any{"csp": map[string]any{"connectDomains": []string{"https://api." + server + ".example"}},
		"domain": server + ".views.example", "prefersBorder": true}}
}

// viewMetaJSON is viewMeta as the go-sdk writes it.
func viewMetaJSON(server string) string {
	return `{"ui":{"csp":{"connectDomains":["https://api.` + server + `.example"]},"domain":"` + server + `.views.example","prefersBorder":true}}`
}

func startTemplateUpstream(t *testing.T, name string, views []string, templates ...string) *templateUpstream {
	t.Helper()
	u := &templateUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{},
			Extensions: map[string]any{mcpwire.ExtUI: map[string]any{}}},
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			u.mu.Lock()
			u.subs = append(u.subs, req.Params.URI)
			u.mu.Unlock()
			return nil
		},
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{name + " " + req.Params.Ref.URI}}}, nil
		},
	})
	read := func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
			URI: req.Params.URI, MIMEType: mcpwire.MimeTypeApp, Text: name + " " + req.Params.URI, Meta: viewMeta(name)}}}, nil
	}
	for _, v := range views {
		srv.AddResource(&mcp.Resource{URI: v, Name: v, MIMEType: mcpwire.MimeTypeApp, Meta: viewMeta(name)}, read)
	}
	for _, tmpl := range templates {
		srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: tmpl, Name: name + " " + tmpl, MIMEType: mcpwire.MimeTypeApp, Meta: viewMeta(name)}, read)
	}
	u.sdkUpstream = &sdkUpstream{name: name, server: srv, http: serveSDK(t, srv)}
	return u
}

// templates lists a route's resource templates, each raw, by uriTemplate.
func (c *appsEraClient) templates() map[string]json.RawMessage {
	c.t.Helper()
	r := c.call("resources/templates/list", "{}")
	var res struct {
		Templates []json.RawMessage `json:"resourceTemplates"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil {
		c.t.Fatalf("resources/templates/list: %s", r)
	}
	out := map[string]json.RawMessage{}
	for _, tm := range res.Templates {
		u, _ := jsonrpc.GetString(tm, "uriTemplate")
		out[u] = tm
	}
	return out
}

// readView reads uri: the one content's URI, text and _meta, or the error.
func (c *appsEraClient) readView(uri string) (gotURI, text, meta string, r *eraReply) {
	c.t.Helper()
	r = c.call("resources/read", `{"uri":`+string(jsonrpc.String(uri))+`}`)
	var res struct {
		Contents []struct {
			URI  string          `json:"uri"`
			Text string          `json:"text"`
			Meta json.RawMessage `json:"_meta"`
		} `json:"contents"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || len(res.Contents) != 1 {
		return "", "", "", r
	}
	return res.Contents[0].URI, res.Contents[0].Text, string(res.Contents[0].Meta), r
}

// completeRef is the first completion value for a ref/resource of uri.
func (c *appsEraClient) completeRef(uri string) (string, *eraReply) {
	c.t.Helper()
	r := c.call("completion/complete", `{"ref":{"type":"ref/resource","uri":`+string(jsonrpc.String(uri))+`},"argument":{"name":"city","value":"pa"}}`)
	var res struct {
		Completion struct {
			Values []string `json:"values"`
		} `json:"completion"`
	}
	if r.Error != nil || json.Unmarshal(r.Result, &res) != nil || len(res.Completion.Values) == 0 {
		return "", r
	}
	return res.Completion.Values[0], r
}

// The templates of the tests below: weather's view template, and three
// whose literal beginning could begin a ui:// URI without being ui://
// (left out of a merged route's list); a template of another scheme; and
// maps' hostile catch-all ui://{x}, which as the upstream wrote it
// matches every other server's namespaced views.
const (
	forecastTmpl = "ui://weather/forecast/{city}"
	anyTmpl      = "{+anything}"
	upperTmpl    = "UI://{x}"
	halfTmpl     = "ui:{/a,b}"
	fileTmpl     = "file:///weather/{name}"
	catchAllTmpl = "ui://{x}"
)

// MCP Apps view templates through a merged route (/mcp, names prefixed)
// in both eras: a ui:// template is listed in its server's namespace with
// its other members intact, the URIs it expands to are read from that
// server with the URI its own template gives (and come back namespaced),
// completions of it go to that server under its own template, templates
// that could expand into another server's namespace are left out, and a
// hostile upstream's catch-all template reads, completes and subscribes
// nothing of another server's.
func TestAppsTemplatesMergedRoute(t *testing.T) {
	weather := startTemplateUpstream(t, "weather", []string{"ui://dash"}, forecastTmpl, anyTmpl, upperTmpl, halfTmpl, fileTmpl)
	maps := startTemplateUpstream(t, "maps", nil, catchAllTmpl)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{
		"weather": httpServer(weather.http.URL), "maps": httpServer(maps.http.URL)}}})

	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			host := appsClient(t, e, gw.URL+"/mcp", true)

			// Listed: view templates namespaced, _meta and the other
			// members as the server wrote them; other schemes as they are.
			tmpls := host.templates()
			want := map[string]string{
				"ui://weather__weather/forecast/{city}": `{"_meta":` + viewMetaJSON("weather") + `,"mimeType":"text/html;profile=mcp-app","name":"weather ui://weather/forecast/{city}","uriTemplate":"ui://weather__weather/forecast/{city}"}`,
				"ui://maps__{x}":                        `{"_meta":` + viewMetaJSON("maps") + `,"mimeType":"text/html;profile=mcp-app","name":"maps ui://{x}","uriTemplate":"ui://maps__{x}"}`,
				fileTmpl:                                `{"_meta":` + viewMetaJSON("weather") + `,"mimeType":"text/html;profile=mcp-app","name":"weather file:///weather/{name}","uriTemplate":"file:///weather/{name}"}`,
			}
			for u, raw := range want {
				if got := string(tmpls[u]); got != raw {
					t.Errorf("template %s listed as %s, want %s", u, got, raw)
				}
			}
			if len(tmpls) != len(want) {
				t.Errorf("templates listed: %v, want %d (%s, %s and %s left out)", slices.Sorted(func(yield func(string) bool) {
					for u := range tmpls {
						if !yield(u) {
							return
						}
					}
				}), len(want), anyTmpl, upperTmpl, halfTmpl)
			}

			// A URI expanded from the namespaced template: read from
			// weather as the URI its own template gives, back namespaced
			// with its _meta.
			uri, text, meta, r := host.readView("ui://weather__weather/forecast/paris")
			if uri != "ui://weather__weather/forecast/paris" || text != "weather ui://weather/forecast/paris" || meta != viewMetaJSON("weather") {
				t.Errorf("read of an expanded view template: %q %q %s (%s)", uri, text, meta, r)
			}

			// Hostile: maps' ui://{x} matches weather's namespaced view
			// ui://weather__dash as the upstream wrote it, but weather's
			// views are weather's.
			uri, text, _, r = host.readView("ui://weather__dash")
			if uri != "ui://weather__dash" || text != "weather ui://dash" {
				t.Errorf("weather's view: %q %q (%s)", uri, text, r)
			}
			// What maps' listed template expands to stays with maps, even
			// spelled like weather's namespace; maps' answer naming that
			// URI comes back in maps' namespace.
			uri, text, _, r = host.readView("ui://maps__weather__dash")
			if uri != "ui://maps__weather__dash" || text != "maps ui://weather__dash" {
				t.Errorf("maps' template expanded over weather's name: %q %q (%s)", uri, text, r)
			}

			// Completions of a view template go to its server, under the
			// template that server wrote.
			if v, r := host.completeRef("ui://weather__weather/forecast/{city}"); v != "weather "+forecastTmpl {
				t.Errorf("completion of weather's template: %q (%s)", v, r)
			}
			if v, r := host.completeRef("ui://maps__{x}"); v != "maps "+catchAllTmpl {
				t.Errorf("completion of maps' template: %q (%s)", v, r)
			}
		})
	}
}

// A view of a merged route is read, not watched: a subscription to a
// namespaced view URI (ui://weather__dash, which maps' catch-all template
// matches as the upstream wrote it) is refused with a precise error in the handshake era
// and left out of a listen stream's agreed filter in 2026-07-28, and no
// upstream is asked to subscribe to it. The same URI on the server's own
// route is subscribed to and its updates arrive under it (below).
func TestAppsTemplatesMergedSubscription(t *testing.T) {
	weather := startTemplateUpstream(t, "weather", []string{"ui://dash"}, forecastTmpl)
	maps := startTemplateUpstream(t, "maps", nil, catchAllTmpl)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{
		"weather": httpServer(weather.http.URL), "maps": httpServer(maps.http.URL)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const uri = "ui://weather__weather/forecast/paris"

	old := appsClient(t, eras[0], gw.URL+"/mcp", true)
	for _, u := range []string{uri, "ui://weather__dash"} {
		for _, method := range []string{"resources/subscribe", "resources/unsubscribe"} {
			r := old.call(method, `{"uri":"`+u+`"}`)
			if r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(r.Error.Message, "read, not subscribed to") ||
				string(r.Error.Data) != `{"uri":"`+u+`"}` {
				t.Errorf("%s of namespaced view %s: %s", method, u, r)
			}
		}
	}
	events := openListen(t, ctx, gw.URL+"/mcp", `"l-1"`, `{"resourceSubscriptions":["`+uri+`","ui://weather__dash"]}`)
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), "notifications/subscriptions/acknowledged") || strings.Contains(string(ev.Data), "ui://") {
		t.Errorf("listen ack: %s %v", ev.Data, err)
	}
	if w, m := weather.subscribed(), maps.subscribed(); len(w)+len(m) != 0 {
		t.Errorf("upstream subscriptions: weather %v, maps %v", w, m)
	}
}

// MCP Apps view templates through a single-server route in both eras:
// nothing is renamed or left out, reads and completions carry the
// server's own URIs, and a subscription to a URI expanded from a view
// template reaches the server, whose updates come back under that URI.
func TestAppsTemplatesSingleServerRoute(t *testing.T) {
	weather := startTemplateUpstream(t, "weather", []string{"ui://dash"}, forecastTmpl, anyTmpl, upperTmpl, halfTmpl, fileTmpl)
	_, gw := startGatewayWith(t, Options{Config: &config.Config{Servers: map[string]*config.Server{"weather": httpServer(weather.http.URL)}}})
	url := gw.URL + "/mcp/weather"
	for _, e := range eras {
		t.Run(e.name, func(t *testing.T) {
			host := appsClient(t, e, url, true)
			tmpls := host.templates()
			for _, u := range []string{forecastTmpl, anyTmpl, upperTmpl, halfTmpl, fileTmpl} {
				if want := `"uriTemplate":` + string(jsonrpc.String(u)); !strings.Contains(string(tmpls[u]), want) ||
					!strings.Contains(string(tmpls[u]), `"_meta":`+viewMetaJSON("weather")) {
					t.Errorf("template %s listed as %s", u, tmpls[u])
				}
			}
			if len(tmpls) != 5 {
				t.Errorf("%d templates listed, want 5", len(tmpls))
			}
			uri, text, meta, r := host.readView("ui://weather/forecast/paris")
			if uri != "ui://weather/forecast/paris" || text != "weather ui://weather/forecast/paris" || meta != viewMetaJSON("weather") {
				t.Errorf("read of an expanded view template: %q %q %s (%s)", uri, text, meta, r)
			}
			if v, r := host.completeRef(forecastTmpl); v != "weather "+forecastTmpl {
				t.Errorf("completion: %q (%s)", v, r)
			}
		})
	}

	// Watched in both eras: a handshake-era client's subscription and a
	// 2026-07-28 listen stream's.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const uri = "ui://weather/forecast/paris"
	updated := make(chan string, 4)
	cs := connectTo(t, ctx, url, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}, handshakeEra)
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	events := openListen(t, ctx, url, `"l-1"`, `{"resourceSubscriptions":["`+uri+`"]}`)
	if ev, err := events.Next(); err != nil || !strings.Contains(string(ev.Data), `"resourceSubscriptions":["`+uri+`"]`) {
		t.Fatalf("listen ack: %s %v", ev.Data, err)
	}
	if got := weather.subscribed(); len(got) == 0 || slices.ContainsFunc(got, func(u string) bool { return u != uri }) {
		t.Errorf("weather's subscriptions: %v", got)
	}
	listened := make(chan string, 1)
	go func() {
		if ev, err := events.Next(); err == nil {
			listened <- string(ev.Data)
		}
	}()
	if err := weather.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	var heard, streamed string
	for heard == "" || streamed == "" {
		select {
		case heard = <-updated:
		case streamed = <-listened:
		case <-ctx.Done():
			t.Fatalf("updates: handshake-era %q, listener %q", heard, streamed)
		}
	}
	if heard != uri {
		t.Errorf("handshake-era client heard an update of %q", heard)
	}
	if !strings.Contains(streamed, `"method":"notifications/resources/updated"`) || !strings.Contains(streamed, `"uri":"`+uri+`"`) {
		t.Errorf("listener got %s", streamed)
	}
}

// Whatever uriTemplate an upstream writes, a merged route lists none that
// can expand into another server's view namespace: every listed template
// that can expand to a ui:// URI is in its own server's namespace (in the
// form every decoder reads, case-insensitive ones included), and what it
// expands to is routed back to that server with the URI its own template
// gives, or refused, never to another server.
func FuzzAppsTemplate(f *testing.F) {
	for _, seed := range []struct{ raw, x string }{
		{`{"uriTemplate":"ui://w/{x}"}`, "v"},
		{`{"uriTemplate":"ui://{x}"}`, "b__v"},
		{`{"uriTemplate":"{+u}"}`, "ui://b__v"},
		{`{"uriTemplate":"ui:{/a,b}"}`, "/b__v"},
		{`{"uriTemplate":"u{x}"}`, "i://b__v"},
		{`{"uriTemplate":"UI://{x}"}`, "b__v"},
		{`{"uriTemplate":"file:///{p}"}`, "x"},
		{`{"uriTemplate":"ui://b__v"}`, ""},
		{`{"URITEMPLATE":"ui://b__{x}","uriTemplate":"ui://{x}"}`, "v"},
		{`{"uriTemplate":"ui://{x}","uriTemplate":"ui://b__{x}"}`, "v"},
		{`{"uri\u0054emplate":"ui://{x}","_meta":{"ui":{}}}`, "v"},
		{`{"uriTemplate":"ui://{x}"}`, "b__a__v"},
	} {
		f.Add(seed.raw, seed.x)
	}
	g := &Gateway{sep: "__"}
	rt := &route{servers: []string{"a", "b", "a__b"}, prefixed: true}
	f.Fuzz(func(t *testing.T, raw, x string) {
		key, ok := jsonrpc.GetString([]byte(raw), "uriTemplate") // as the catalog reads it
		if !ok || key == "" {
			return
		}
		items := g.viewTemplates(rt, []catalog.Item{{Server: "a", Key: key, Raw: json.RawMessage(raw)}})
		if len(items) == 0 {
			return // left out
		}
		out := g.listedTemplate("a", key, []byte(raw))
		var tm struct {
			URITemplate string `json:"uriTemplate"`
		}
		if json.Unmarshal(out, &tm) != nil {
			return
		}
		if json.Valid([]byte(raw)) && tm.URITemplate != key && tm.URITemplate != g.uiNamespaced("a", key) {
			t.Fatalf("listed uriTemplate %q of %q (from %s)", tm.URITemplate, key, raw)
		}
		listed, _ := jsonrpc.GetString(out, "uriTemplate")
		// Expand the first expression with x (any operator may write
		// anything there).
		uri := listed
		if i := strings.IndexByte(listed, '{'); i >= 0 {
			rest := ""
			if j := strings.IndexByte(listed[i:], '}'); j >= 0 {
				rest = listed[i+j+1:]
			}
			uri = listed[:i] + x + rest
		}
		if !strings.HasPrefix(uri, mcpwire.SchemeUI) {
			return
		}
		server, orig, ok, ambiguous := g.uiOriginal(rt, uri)
		switch {
		case ambiguous:
		case !ok:
			if strings.Contains(listed, "{") {
				t.Fatalf("template %q (listed %q) expands to %q, in no namespace", key, listed, uri)
			}
		case server != "a" || g.uiNamespaced("a", orig) != uri:
			t.Fatalf("template %q of a (listed %q) expands to %q, routed to %s as %q", key, listed, uri, server, orig)
		}
	})
}
