package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/mcpgate/mcpgate/internal/callers"
	"github.com/mcpgate/mcpgate/internal/store"
)

// One error path (STYLE 7), as internal/gateway's httperror.go: a handler,
// or a check it calls, that refuses a request returns an *apiError instead
// of writing to the ResponseWriter, and one adapter, (*API).writeError,
// turns it into the status, the headers, the JSON body and one log line.
// The client sees the safe message, the log the cause; neither ever sees a
// request body, a secret or a tool argument. A handler cannot answer twice
// or forget to stop after a refusal: it returns. Handlers still write
// their successful answers themselves (writeJSON).

// handlerFunc is an admin endpoint: it writes its answer, or returns the
// refusal for the adapter to write (tailscale's tsweb.ReturnHandler).
type handlerFunc func(http.ResponseWriter, *http.Request) error

// handle adapts h to net/http: its error is written by writeError.
func (a *API) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			a.writeError(w, r, err)
		}
	}
}

// apiError is a refusal as the client will see it.
type apiError struct {
	status int
	// header is set on the response before the body (Retry-After).
	header http.Header
	// The body: errorBody{title, details}, the API's error shape; or
	// body, when a refusal also says what was done (terminateRefused,
	// reloadBody, a failed tool call); or failure's own bytes, an
	// authentication failure as the authenticator answers it.
	title, details string
	body           any
	failure        *callers.Failure
	// cause, when set, is logged at level as msg with attrs (never
	// sent: the client has details).
	msg   string
	cause error
	level slog.Level
	attrs []any
}

// errorBody is the JSON of every admin refusal but those with a body of
// their own: {"error": title, "details": details}.
type errorBody struct {
	Error   string `json:"error"`
	Details string `json:"details,omitempty"`
}

func (e *apiError) Error() string {
	switch {
	case e.cause != nil:
		return e.cause.Error()
	case e.details != "":
		return e.title + ": " + e.details
	}
	return e.title
}

func (e *apiError) Unwrap() error { return e.cause }

// refusal is status with the status's own text as the error and details
// saying why.
func refusal(status int, details string) *apiError {
	return &apiError{status: status, title: http.StatusText(status), details: details}
}

// badRequest, notFound and conflict are the common refusals.
func badRequest(details string) *apiError { return refusal(http.StatusBadRequest, details) }
func notFound(details string) *apiError   { return refusal(http.StatusNotFound, details) }
func conflict(details string) *apiError   { return refusal(http.StatusConflict, details) }

// failed answers an authentication failure byte for byte as
// (*callers.Failure).Write sends it.
func failed(f *callers.Failure) *apiError {
	return &apiError{status: f.Status, failure: f}
}

// withBody answers body instead of errorBody.
func (e *apiError) withBody(body any) *apiError {
	e.body = body
	return e
}

// withHeader sets a response header of e.
func (e *apiError) withHeader(key, value string) *apiError {
	if e.header == nil {
		e.header = http.Header{}
	}
	e.header.Set(key, value)
	return e
}

// logged makes e log msg, cause and attrs at level when it is written.
// attrs name things (a server, a count), never values a caller sent.
func (e *apiError) logged(level slog.Level, msg string, cause error, attrs ...any) *apiError {
	e.level, e.msg, e.cause, e.attrs = level, msg, cause, attrs
	return e
}

// storeUnavailable is a request the store did not serve: 503, and
// nothing was read or changed; msg and cause are logged.
func storeUnavailable(msg string, cause error, attrs ...any) *apiError {
	return refusal(http.StatusServiceUnavailable, "the store did not answer; nothing was changed: try again shortly").
		withHeader("Retry-After", "1").
		logged(slog.LevelError, msg, cause, attrs...)
}

// storeError is the refusal of a store error about the object alias
// names (a key's alias, a server's or toolset's name).
func storeError(err error, alias string) *apiError {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFound(fmt.Sprintf("no key %q", alias))
	case errors.Is(err, store.ErrConflict):
		return conflict(fmt.Sprintf("a key with alias %q already exists", alias))
	case errors.Is(err, store.ErrInvalid):
		return badRequest(err.Error())
	}
	// Unreachable, timed out, or failing: nothing it was asked was done,
	// and nothing is acknowledged that is not durable.
	return storeUnavailable("admin store error", err)
}

// The attributes of the adapter's log line (STYLE: constant keys).
const (
	attrMethod = "method"
	attrPath   = "path"
	attrStatus = "status"
	attrError  = "error"
)

// writeError is the adapter: it answers err on w and logs one line. An
// error that is no *apiError is a bug's: 500 with no detail, the cause in
// the log. A refusal with a cause logs it; one without is the caller's
// mistake (debug, by status and path only) or a server's answer the
// client was told as it is (warn, with those details).
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = refusal(http.StatusInternalServerError, "").logged(slog.LevelError, "admin request failed", err)
	}
	args := []any{attrMethod, r.Method, attrPath, r.URL.Path, attrStatus, e.status}
	switch {
	case e.cause != nil:
		args = append(append(args, e.attrs...), attrError, e.cause)
		a.log.Log(r.Context(), e.level, e.msg, args...)
	case e.status >= 500:
		a.log.Log(r.Context(), slog.LevelWarn, "admin request failed", append(args, attrError, e.Error())...)
	default:
		a.log.Log(r.Context(), slog.LevelDebug, "admin request refused", args...)
	}
	e.write(w)
}

// write sends e.
func (e *apiError) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range e.header {
		h[k] = append([]string(nil), v...)
	}
	switch {
	case e.failure != nil:
		e.failure.Write(w)
	case e.body != nil:
		writeJSON(w, e.status, e.body)
	default:
		writeJSON(w, e.status, errorBody{Error: e.title, Details: e.details})
	}
}
