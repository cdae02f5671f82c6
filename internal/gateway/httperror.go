package gateway

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// One error path (STYLE 7): a gate or handler that refuses a request
// returns an *httpError instead of writing to the ResponseWriter, and one
// adapter, writeError, turns it into the status, the headers and the body
// (a JSON-RPC error, a plain JSON object or a callers.Failure's bytes),
// and the log line of its cause. The client sees the safe message, the log
// the cause; a gate cannot answer twice or forget to stop.

// httpError is a refusal as the client will see it.
type httpError struct {
	status int
	// header is set on the response before the body: WWW-Authenticate,
	// Allow, Retry-After.
	header http.Header
	// The body: a JSON-RPC error response to id, else json marshalled,
	// else raw (already JSON: a callers.Failure's body, sent with its
	// length), else text as http.Error sends it.
	rpc  *jsonrpc.Error
	id   jsonrpc.ID
	json any
	raw  []byte
	text string
	// cause, when set, is logged at level (never sent).
	cause error
	level slog.Level
}

func (e *httpError) Error() string {
	switch {
	case e.cause != nil:
		return e.cause.Error()
	case e.rpc != nil:
		return e.rpc.Message
	}
	return http.StatusText(e.status)
}

func (e *httpError) Unwrap() error { return e.cause }

// rpcRefusal refuses with a JSON-RPC error response (no id) and status.
func rpcRefusal(status int, e *jsonrpc.Error) *httpError {
	return &httpError{status: status, rpc: e}
}

// jsonRefusal refuses with a plain JSON body and status.
func jsonRefusal(status int, body any) *httpError {
	return &httpError{status: status, json: body}
}

// failureRefusal is an authentication failure as the adapter writes it,
// byte for byte what (*callers.Failure).Write sends.
func failureRefusal(f *callers.Failure) *httpError {
	body := f.Body
	if body == nil {
		body = []byte{} // still a JSON response of length 0, as Write sends it
	}
	return &httpError{status: f.Status, header: f.Header, raw: body}
}

// withHeader sets a response header of e.
func (e *httpError) withHeader(key, value string) *httpError {
	if e.header == nil {
		e.header = http.Header{}
	}
	e.header.Set(key, value)
	return e
}

// logged makes e log cause at level when it is written.
func (e *httpError) logged(level slog.Level, cause error) *httpError {
	e.level, e.cause = level, cause
	return e
}

// errClientGone: the client went away while the request waited; there is
// no one to answer.
var errClientGone = errors.New("client gone")

// writeError is the adapter: it answers err on w. An error that is no
// *httpError is a bug's: 500 with no detail, the cause in the log.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errClientGone) {
		return
	}
	var e *httpError
	if !errors.As(err, &e) {
		e = jsonRefusal(http.StatusInternalServerError, map[string]any{"error": "MCP request failed", "details": "internal error"}).
			logged(slog.LevelError, err)
	}
	if e.cause != nil {
		g.log.Log(r.Context(), e.level, "request refused", "path", r.URL.Path, "status", e.status, "error", e.cause)
	}
	e.write(w)
}

// write sends e; each kind of body is sent exactly as the writer the
// gates used before (writeRPCError, writeJSON, Failure.Write).
func (e *httpError) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range e.header {
		h[k] = append([]string(nil), v...)
	}
	switch {
	case e.rpc != nil:
		writeRPCErrorID(w, e.status, e.id, e.rpc)
	case e.json != nil:
		writeJSON(w, e.status, e.json)
	case e.raw != nil:
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(e.raw)))
		w.WriteHeader(e.status)
		_, _ = w.Write(e.raw)
	case e.text != "":
		http.Error(w, e.text, e.status)
	default:
		w.WriteHeader(e.status)
	}
}

// errorHandler is a handler that returns its refusal (tailscale's
// ReturnHandler): ServeHTTP writes it with the gateway's adapter.
type errorHandler struct {
	g *Gateway
	h func(http.ResponseWriter, *http.Request) error
}

func (h errorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.h(w, r); err != nil {
		h.g.writeError(w, r, err)
	}
}

// methodNotAllowed is the 405 of a transport endpoint, naming the
// methods it takes.
func methodNotAllowed(allow string) *httpError {
	return rpcRefusal(http.StatusMethodNotAllowed, jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Method not allowed")).
		withHeader("Allow", allow)
}

// shuttingDown refuses new work once Shutdown began.
func shuttingDown() *httpError {
	return rpcRefusal(http.StatusServiceUnavailable, jsonrpc.NewError(jsonrpc.CodeInternalError, "Gateway is shutting down"))
}

// notFound is the plain JSON 404 of the gateway's own documents, with
// details when there are any.
func notFound(details string) *httpError {
	if details == "" {
		return jsonRefusal(http.StatusNotFound, map[string]string{"error": "Not Found"})
	}
	return jsonRefusal(http.StatusNotFound, map[string]string{"error": "Not Found", "details": details})
}
