package config

import (
	"errors"
	"net/url"
	"strings"
)

// DefaultClientMetadataPath is where the gateway publishes its client ID
// metadata document below an https public_url unless client_metadata_url
// says otherwise.
const DefaultClientMetadataPath = "/oauth/client-metadata.json"

// ClientMetadataDocument is the gateway's client ID metadata document:
// its URL (the client_id it stands for) and the path, below public_url,
// at which the gateway serves it. ok is false when there is none: no
// https public_url (the document's URL and its redirect URI must be
// https and fixed, not from each request's Host).
func (c *Config) ClientMetadataDocument() (docURL, path string, ok bool) {
	if !strings.HasPrefix(c.PublicURL, "https://") {
		return "", "", false
	}
	docURL = c.ClientMetadataURL
	if docURL == "" {
		docURL = strings.TrimRight(c.PublicURL, "/") + DefaultClientMetadataPath
	}
	path, err := c.clientMetadataPath(docURL)
	if err != nil {
		return "", "", false
	}
	return docURL, path, true
}

// clientMetadataPath checks a client metadata document URL against
// public_url and returns its path below it.
func (c *Config) clientMetadataPath(raw string) (string, error) {
	base := strings.TrimRight(c.PublicURL, "/")
	if !strings.HasPrefix(base, "https://") || !validPublicURL(base) {
		return "", errors.New("needs an https public_url, under which the gateway serves the document")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(raw, "#") {
		return "", errors.New("must be an https URL without user info, query or fragment")
	}
	rest, found := strings.CutPrefix(raw, base+"/")
	if !found {
		return "", errors.New("must be under public_url (" + base + "/...)")
	}
	path := "/" + rest
	if !strings.HasSuffix(path, ".json") || strings.Contains(path, "//") || strings.ContainsRune(path, '%') {
		return "", errors.New("must name a .json document below public_url")
	}
	for _, seg := range strings.Split(path, "/") {
		if seg == "." || seg == ".." {
			return "", errors.New("must not have dot segments")
		}
	}
	return path, nil
}
