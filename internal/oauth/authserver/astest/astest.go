// Package astest is a test browser for mcpgate's authorization server
// pages: a cookie jar, redirects followed up to a client's redirect URI
// (where it stops and reports the Location), and the pages' forms
// submitted with their hidden fields. It is for tests only; no
// production code imports it.
package astest

import (
	"errors"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Browser is one person's browser.
type Browser struct {
	T      testing.TB
	C      *http.Client
	StopAt string // a redirect to a URL with this prefix is not followed
}

// Page is a response the browser stopped at.
type Page struct {
	Status   int
	Header   http.Header
	Body     string
	Location *url.URL // set for a redirect that was not followed
}

// NewBrowser returns a browser that stops at redirects to stopAt.
func NewBrowser(t testing.TB, stopAt string) *Browser {
	jar, _ := cookiejar.New(nil)
	b := &Browser{T: t, StopAt: stopAt}
	b.C = &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), b.StopAt) {
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	return b
}

// Do sends req with the browser's cookies and redirect rule.
func (b *Browser) Do(req *http.Request) *Page { return b.DoWith(b.C, req) }

// DoWith sends req with c (the browser's client with another redirect
// rule, say).
func (b *Browser) DoWith(c *http.Client, req *http.Request) *Page {
	b.T.Helper()
	resp, err := c.Do(req)
	if err != nil {
		b.T.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	p := &Page{Status: resp.StatusCode, Header: resp.Header, Body: string(body)}
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode/100 == 3 {
		u, err := resp.Request.URL.Parse(loc)
		if err != nil {
			b.T.Fatal(err)
		}
		p.Location = u
	}
	return p
}

// Get fetches u.
func (b *Browser) Get(u string) *Page {
	b.T.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	return b.Do(req)
}

var (
	formRE   = regexp.MustCompile(`(?s)<form[^>]*method="post"[^>]*action="([^"]*)"[^>]*>(.*?)</form>`)
	hiddenRE = regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`)
)

// Submit posts the first form of p whose body contains marker (a field
// name or a button), with its hidden fields and the given ones; base
// resolves a relative action.
func (b *Browser) Submit(base string, p *Page, marker string, fields url.Values) *Page {
	b.T.Helper()
	for _, m := range formRE.FindAllStringSubmatch(p.Body, -1) {
		if !strings.Contains(m[2], marker) {
			continue
		}
		v := url.Values{}
		for _, h := range hiddenRE.FindAllStringSubmatch(m[2], -1) {
			v.Set(h[1], html.UnescapeString(h[2]))
		}
		for k, vs := range fields {
			v[k] = vs
		}
		action, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			b.T.Fatal(err)
		}
		bu, err := url.Parse(base)
		if err != nil {
			b.T.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, bu.ResolveReference(action).String(), strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return b.Do(req)
	}
	b.T.Fatalf("no form with %q on the page (status %d):\n%s", marker, p.Status, p.Body)
	return nil
}
