package authserver

import (
	"bytes"
	"html/template"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// The pages are plain server-rendered HTML forms: no script at all, so
// the Content-Security-Policy can forbid it, and a test (or a text
// browser) can drive them with nothing but form posts. They are parsed
// on first use: a gateway without auth.login never renders one, and
// parsed at init they took ~50 KB of heap and 830 allocations in every
// gateway.

var pages = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("layout").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>{{.Title}} – mcpgate</title>
<style>
body{font-family:system-ui,-apple-system,sans-serif;max-width:30rem;margin:4rem auto;padding:0 1rem;color:#1d1d1f;line-height:1.5}
h1{font-size:1.4rem}
.box{border:1px solid #d2d2d7;border-radius:8px;padding:1rem 1.25rem;margin:1rem 0}
.error{background:#fff0f0;border-color:#e0a0a0}
.warn{background:#fff8e6;border-color:#e6c27a}
label{display:block;font-weight:600;margin-bottom:.25rem}
input[type=password]{width:100%;box-sizing:border-box;padding:.5rem;font:inherit}
button{font:inherit;padding:.5rem 1rem;margin:.5rem .5rem 0 0;border-radius:6px;border:1px solid #888;background:#f5f5f7;cursor:pointer}
button.primary{background:#0066cc;color:#fff;border-color:#0066cc}
code{font-size:.9em}
.muted{color:#6e6e73;font-size:.9rem}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{template "body" .}}
</main>
</body>
</html>
`))
})

var errorPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.Must(pages().Clone()).Parse(`{{define "body"}}
<div class="box error">
<p>{{.Message}}</p>
<p class="muted">Error: <code>{{.Code}}</code></p>
</div>
<p class="muted">You can close this window and try again from your application.</p>
{{end}}`))
})

var loginPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.Must(pages().Clone()).Parse(`{{define "body"}}
<p><strong>{{.ClientName}}</strong> wants to use mcpgate on your behalf. Sign in to continue.</p>
{{if .Error}}<div class="box error" role="alert"><p id="error">{{.Error}}</p></div>{{end}}
{{if .Keys}}
<form class="box" method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="key">Paste your mcpgate key</label>
<input type="password" id="key" name="key" autocomplete="off" required>
<button class="primary" type="submit" name="login" value="key">Sign in with key</button>
</form>
{{end}}
{{if .IDP}}
<form class="box" method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<button{{if not .Keys}} class="primary"{{end}} type="submit" name="login" value="idp">Sign in with your company account</button>
</form>
{{end}}
{{end}}`))
})

var consentPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.Must(pages().Clone()).Parse(`{{define "body"}}
<p><strong id="client-name">{{.ClientName}}</strong> asks to use mcpgate as <strong>{{.Person}}</strong>.</p>
<div class="box">
<p>It asks for access to <strong id="resource">{{.Resource}}</strong>{{if .Scope}} (scope <code>{{.Scope}}</code>){{end}}, and to nothing else.</p>
<p class="muted">Resource: <code id="resource-url">{{.ResourceURL}}</code></p>
<p>After you approve, you will be sent back to <strong id="redirect-host">{{.RedirectHost}}</strong>.</p>
{{if .Unverified}}<p class="muted">The name above is what the application registered itself as; mcpgate has not verified it.</p>{{end}}
{{if .ClientURL}}<p class="muted">Client ID: <code>{{.ClientURL}}</code></p>{{end}}
</div>
{{if .Admin}}<div class="box warn" id="admin-warning" role="alert">
{{if .PersonAdmin}}<p><strong>You are an administrator of this gateway. Approving gives {{.ClientName}} administrator rights over it</strong>: it can create and revoke keys, add, change and remove servers, change who may use what, end sessions and read the audit log, as you can.</p>
{{else if .PersonNotAdmin}}<p>The admin API lets {{.ClientName}} see and change your own connections and credentials at mcpgate.</p>
{{else}}<p><strong>If you have administrator rights at this gateway, approving gives {{.ClientName}} administrator rights over it</strong>: it can create and revoke keys, add, change and remove servers, change who may use what, end sessions and read the audit log.</p>
{{end}}<p>mcpgate asks every time an application asks for its admin API. Approve only if you just started this from the mcpgate console or from a tool you use to administer mcpgate.</p>
</div>{{end}}
{{if .Loopback}}<div class="box warn"><p>The application receives the approval on this computer (<code>{{.RedirectHost}}</code>). Approve only if you just started signing in from an application on this computer.</p></div>{{end}}
<form method="post" action="{{.Action}}">
<input type="hidden" name="request" value="{{.Request}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<button class="primary" type="submit" id="approve" name="decision" value="approve">Approve</button>
<button type="submit" id="deny" name="decision" value="deny">Deny</button>
</form>
{{end}}`))
})

var cspSourceRE = regexp.MustCompile(`^https?://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:[0-9]+)?$`)

// securityHeaders are set on every page. formTargets are the origins a
// form on the page may lead to besides this one: browsers apply
// form-action to the redirects that follow a submission too, so it names
// the IdP and the client's redirect URI.
func securityHeaders(h http.Header, formTargets ...string) {
	fa := "'self'"
	seen := map[string]bool{}
	for _, t := range formTargets {
		// Only scheme://host[:port] of a checked host reaches here; the
		// test is a second line against a header injection.
		if t != "" && !seen[t] && cspSourceRE.MatchString(t) {
			seen[t] = true
			fa += " " + t
		}
	}
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self' 'unsafe-inline'; form-action "+fa+"; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	// same-origin, not no-referrer: under no-referrer a browser's form
	// post says "Origin: null", which the gateway's Origin check refuses;
	// other origins still get no referrer (no code or state leaks).
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "text/html; charset=utf-8")
}

func (s *Server) render(w http.ResponseWriter, t *template.Template, status int, data any, formTargets ...string) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		s.logger.Error("oauth page", attrErr, err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	securityHeaders(w.Header(), formTargets...)
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (s *Server) renderError(w http.ResponseWriter, oe *oauthError) {
	msg := oe.Description
	if msg == "" {
		msg = "The sign-in could not be completed."
	}
	s.render(w, errorPage(), oe.Status, map[string]string{"Title": "Sign-in failed", "Message": msg, "Code": oe.Code})
}

func (s *Server) idpOrigin() string {
	if s.idp == nil {
		return ""
	}
	return s.idp.origin()
}

func (s *Server) renderLogin(w http.ResponseWriter, p *pending, errMsg string, status int) {
	s.render(w, loginPage(), status, map[string]any{
		"Title":      "Sign in",
		"ClientName": displayName(p.client),
		"Error":      errMsg,
		"Keys":       s.login.Keys,
		"IDP":        s.idp != nil,
		"Action":     issuerPath(p.issuer) + "/oauth/login",
		"Request":    p.id,
		"CSRF":       p.csrf,
	}, s.idpOrigin(), originOf(p.redirectURI))
}

// consentAsk is what a consent page asks for: the resource in words and
// as a URL, whether it is the admin API, and whether the person has admin
// rights there (nil: unknown).
type consentAsk struct {
	resource, url string
	admin         bool
	personAdmin   *bool
}

func (s *Server) renderConsent(w http.ResponseWriter, p *pending, ask consentAsk) {
	who := p.person.User
	if p.person.Email != "" {
		who = p.person.Email
	}
	if who == "" {
		who = p.person.Subject
	}
	clientURL := ""
	if p.client.Document {
		clientURL = p.client.ID
	}
	title := "Allow access?"
	if ask.admin {
		title = "Allow access to the admin API?"
	}
	s.render(w, consentPage(), http.StatusOK, map[string]any{
		"Title":          title,
		"ClientName":     displayName(p.client),
		"Person":         who,
		"Resource":       ask.resource,
		"ResourceURL":    ask.url,
		"Admin":          ask.admin,
		"PersonAdmin":    ask.personAdmin != nil && *ask.personAdmin,
		"PersonNotAdmin": ask.personAdmin != nil && !*ask.personAdmin,
		"RedirectHost":   hostOf(p.redirectURI),
		"Scope":          p.scope,
		"Unverified":     !p.client.Document,
		"ClientURL":      clientURL,
		"Loopback":       isLoopbackRedirect(p.redirectURI),
		"Action":         issuerPath(p.issuer) + "/oauth/consent",
		"Request":        p.id,
		"CSRF":           p.csrf,
	}, originOf(p.redirectURI))
}

// displayName is what the pages call a client: its name, shortened, or
// for a metadata document without one, the document's host.
func displayName(c *client) string {
	name := strings.TrimSpace(c.Name)
	if name == "" {
		if c.Document {
			name = hostOf(c.ID)
		} else {
			name = "An unnamed application"
		}
	}
	if utf8.RuneCountInString(name) > maxDisplayNameLen {
		r := []rune(name)
		name = string(r[:maxDisplayNameLen]) + "…"
	}
	return name
}
