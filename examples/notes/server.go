package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	uriScheme   = "notes://"
	uriTemplate = "notes://{title}"
	mimeType    = "text/markdown"
)

// noteURI returns the resource URI of the note with the given title: the
// expansion of the template notes://{title}, i.e. the title's UTF-8 bytes
// with everything but unreserved characters percent-encoded.
func noteURI(title string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(uriScheme)+3*len(title))
	b = append(b, uriScheme...)
	for i := 0; i < len(title); i++ {
		c := title[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b = append(b, c)
		} else {
			b = append(b, '%', hex[c>>4], hex[c&15])
		}
	}
	return string(b)
}

// titleFromURI is the inverse of noteURI.
func titleFromURI(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, uriScheme)
	if !ok || rest == "" {
		return "", false
	}
	t, err := url.PathUnescape(rest)
	if err != nil {
		return "", false
	}
	return t, true
}

type notesServer struct {
	store  *Store
	server *mcp.Server
}

type titleArgs struct {
	Title string `json:"title" jsonschema:"the note's title"`
}

type addArgs struct {
	Title string `json:"title" jsonschema:"the note's title; a note with the same title is replaced"`
	Body  string `json:"body" jsonschema:"the note's text (markdown)"`
}

type searchArgs struct {
	Query string `json:"query" jsonschema:"text to look for in titles and bodies, ignoring case"`
}

// newServer returns an MCP server over the notes in store.
func newServer(store *Store, logger *slog.Logger) *mcp.Server {
	ns := &notesServer{store: store}
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Title: "Notes", Version: "1.0.0"}, &mcp.ServerOptions{
		Instructions: "A small note store. Notes are keyed by title; each note is also the resource notes://<title>.",
		Logger:       logger,
		// Resource subscriptions are tracked by the SDK; the handlers only
		// accept them.
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
	})
	ns.server = s

	mcp.AddTool(s, &mcp.Tool{Name: "add_note", Description: "Add a note, or replace the note with the same title."}, ns.addNote)
	mcp.AddTool(s, &mcp.Tool{Name: "list_notes", Description: "List the titles of all notes."}, ns.listNotes)
	mcp.AddTool(s, &mcp.Tool{Name: "get_note", Description: "Get a note by title."}, ns.getNote)
	mcp.AddTool(s, &mcp.Tool{Name: "delete_note", Description: "Delete a note by title."}, ns.deleteNote)
	mcp.AddTool(s, &mcp.Tool{Name: "search_notes", Description: "Find notes whose title or body contains the query (case-insensitive)."}, ns.searchNotes)

	// Notes are read through the template. resources/list is answered by
	// listResources (see there for why), and the sentinel resource only
	// serves to make the SDK send notifications/resources/list_changed.
	s.AddResourceTemplate(&mcp.ResourceTemplate{
		Name:        "note",
		Description: "A note, by title (percent-encoded).",
		URITemplate: uriTemplate,
		MIMEType:    mimeType,
	}, ns.readNote)
	ns.listChanged()
	s.AddReceivingMiddleware(ns.listResources)

	s.AddPrompt(&mcp.Prompt{
		Name:        "summarize_notes",
		Description: "Ask the model to summarize the notes (optionally only those matching a query).",
		Arguments:   []*mcp.PromptArgument{{Name: "query", Description: "only summarize notes matching this text"}},
	}, ns.summarize)
	return s
}

// sentinelURI is a resource the SDK knows of but clients never see.
const sentinelURI = "notes://"

// listChanged makes the SDK send notifications/resources/list_changed to
// every session (debounced). Re-adding a resource counts as a change.
func (ns *notesServer) listChanged() {
	ns.server.AddResource(&mcp.Resource{URI: sentinelURI, Name: "notes"}, ns.readNote)
}

// listResources is a receiving middleware answering resources/list with one
// resource per note, notes://<title> as noteURI spells it.
//
// The notes are not registered with Server.AddResource because it insists
// on URIs that net/url parses, which rejects percent-escapes of ASCII in the
// authority ("notes://todo%20list"), and so on any title with a space.
func (ns *notesServer) listResources(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "resources/list" {
			return next(ctx, method, req)
		}
		res := &mcp.ListResourcesResult{
			Cacheable: mcp.Cacheable{CacheScope: "public"}, // as the SDK fills it in
			Resources: []*mcp.Resource{},
		}
		for _, n := range ns.store.List() {
			res.Resources = append(res.Resources, &mcp.Resource{
				URI:      noteURI(n.Title),
				Name:     n.Title,
				MIMEType: mimeType,
				Size:     int64(len(n.Body)),
			})
		}
		return res, nil
	}
}

func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (ns *notesServer) addNote(ctx context.Context, req *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, any, error) {
	created, err := ns.store.Put(in.Title, in.Body)
	if err != nil {
		return nil, nil, err
	}
	uri := noteURI(in.Title)
	if created {
		ns.listChanged()
		return textResult("added note %q (%s)", in.Title, uri), nil, nil
	}
	if err := ns.server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
		slog.Warn("resource updated notification", "uri", uri, "err", err)
	}
	return textResult("updated note %q (%s)", in.Title, uri), nil, nil
}

type noteSummary struct {
	Title   string `json:"title"`
	URI     string `json:"uri"`
	Updated string `json:"updated"`
}

type listOutput struct {
	Notes []noteSummary `json:"notes"`
}

func summaries(notes []Note) listOutput {
	out := listOutput{Notes: []noteSummary{}}
	for _, n := range notes {
		out.Notes = append(out.Notes, noteSummary{Title: n.Title, URI: noteURI(n.Title), Updated: n.Updated.Format("2006-01-02T15:04:05Z")})
	}
	return out
}

func titlesText(notes []Note, empty string) string {
	if len(notes) == 0 {
		return empty
	}
	var b strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&b, "- %s\n", n.Title)
	}
	return b.String()
}

func (ns *notesServer) listNotes(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, listOutput, error) {
	notes := ns.store.List()
	return textResult("%s", titlesText(notes, "no notes")), summaries(notes), nil
}

func (ns *notesServer) getNote(ctx context.Context, req *mcp.CallToolRequest, in titleArgs) (*mcp.CallToolResult, any, error) {
	n, err := ns.store.Get(in.Title)
	if err != nil {
		return nil, nil, err
	}
	return textResult("%s", n.Body), nil, nil
}

func (ns *notesServer) deleteNote(ctx context.Context, req *mcp.CallToolRequest, in titleArgs) (*mcp.CallToolResult, any, error) {
	if err := ns.store.Delete(in.Title); err != nil {
		return nil, nil, err
	}
	ns.listChanged()
	return textResult("deleted note %q", in.Title), nil, nil
}

func (ns *notesServer) searchNotes(ctx context.Context, req *mcp.CallToolRequest, in searchArgs) (*mcp.CallToolResult, listOutput, error) {
	if strings.TrimSpace(in.Query) == "" {
		return nil, listOutput{}, errors.New("query must not be empty")
	}
	notes := ns.store.Search(in.Query)
	return textResult("%s", titlesText(notes, fmt.Sprintf("no notes match %q", in.Query))), summaries(notes), nil
}

func (ns *notesServer) readNote(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	title, ok := titleFromURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	n, err := ns.store.Get(title)
	if err != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mimeType, Text: n.Body}}}, nil
}

func (ns *notesServer) summarize(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	query := req.Params.Arguments["query"]
	notes := ns.store.List()
	if query != "" {
		notes = ns.store.Search(query)
	}
	var b strings.Builder
	if len(notes) == 0 {
		b.WriteString("There are no notes")
		if query != "" {
			fmt.Fprintf(&b, " matching %q", query)
		}
		b.WriteString(". Say so briefly.")
	} else {
		fmt.Fprintf(&b, "Summarize the following %d note(s) in a few bullet points, grouping related notes.\n", len(notes))
		for _, n := range notes {
			fmt.Fprintf(&b, "\n## %s\n\n%s\n", n.Title, n.Body)
		}
	}
	desc := "Summarize all notes"
	if query != "" {
		desc = fmt.Sprintf("Summarize notes matching %q", query)
	}
	return &mcp.GetPromptResult{
		Description: desc,
		Messages:    []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: b.String()}}},
	}, nil
}
