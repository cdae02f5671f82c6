package gateway

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/upstream"
)

// Era bridging, S18.2: a 2026-07-28 upstream asks for input with an
// input_required result (Multi Round-Trip Requests) where an handshake-era
// upstream would have sent server-initiated requests. For an handshake-era
// downstream the gateway makes those requests on the downstream's session
// (elicitation, sampling, roots/list), and retries the call with the
// answers and the upstream's requestState: the downstream sees one
// ordinary result. A 2026-07-28 downstream gets input_required as it is
// and retries itself.

// maxInputRounds bounds the retries of one call (the go-sdk client's own
// bound is the same).
const maxInputRounds = 10

// relayableCaps is what the gateway can declare to a stateless upstream
// for a call of sc: what the downstream itself declared (a stateless one
// answers input_required itself; an handshake-era one is asked on its session).
func relayableCaps(sc *scope) json.RawMessage { return relayableCapsWith(sc, false) }

// relayableCapsWith is relayableCaps, with the 2026-07-28 tasks extension
// declared when tasks is set: the gateway then follows the upstream's task
// itself (awaitExtensionTask), whatever its client speaks.
func relayableCapsWith(sc *scope, tasks bool) json.RawMessage {
	c := sc.caps
	if c.UI {
		return buildRelayableCaps(c, tasks)
	}
	return relayableCapsTable[relayableCapsIndex(c.Sampling, c.Elicitation || c.ElicitationForm || c.ElicitationURL, c.Roots, tasks)]
}

// relayableCapsTable is relayableCapsWith's answer for each client
// without MCP Apps (most of them), by relayableCapsIndex: made once, as
// every call to a stateless upstream carries one. Shared, so read-only:
// capacity equals length, an append copies.
var relayableCapsTable = func() (t [16]json.RawMessage) {
	for i := range t {
		c := mcpwire.ClientCaps{Sampling: i&1 != 0, Elicitation: i&2 != 0, Roots: i&4 != 0}
		b := buildRelayableCaps(c, i&8 != 0)
		t[i] = b[:len(b):len(b)]
	}
	return t
}()

func relayableCapsIndex(sampling, elicitation, roots, tasks bool) int {
	i := 0
	for bit, on := range []bool{sampling, elicitation, roots, tasks} {
		if on {
			i |= 1 << bit
		}
	}
	return i
}

func buildRelayableCaps(c mcpwire.ClientCaps, tasks bool) json.RawMessage {
	b := []byte{'{'}
	add := func(on bool, member string) {
		if !on {
			return
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, member...)
	}
	add(c.Sampling, `"sampling":{}`)
	add(c.Elicitation || c.ElicitationForm || c.ElicitationURL, `"elicitation":{}`)
	add(c.Roots, `"roots":{}`)
	var ext []byte
	if c.UI {
		// MCP Apps: the client's own declaration, passed on (apps.go).
		settings := c.UISettings
		if len(settings) == 0 {
			settings = json.RawMessage(mcpwire.UISettingsDefault)
		}
		ext = append(ext, `"`+mcpwire.ExtUI+`":`+string(settings)...)
	}
	if tasks {
		if len(ext) > 0 {
			ext = append(ext, ',')
		}
		ext = append(ext, `"`+mcpwire.ExtensionTasks+`":{}`...)
	}
	add(len(ext) > 0, `"extensions":{`+string(ext)+`}`)
	return append(b, '}')
}

// clientError is a call that failed because the downstream client could
// not, or would not, answer an input request: relayed as the JSON-RPC
// error it is, but counted against the client, not the upstream.
type clientError struct{ rpc *jsonrpc.Error }

func (e *clientError) Error() string { return e.rpc.Error() }
func (e *clientError) Unwrap() error { return e.rpc }

// answerInputs runs the rounds of an input_required result for an handshake-era
// downstream: each input request goes to the downstream, and the call is
// sent again with the answers. It returns the final result, or the error
// that ended the exchange.
func (g *Gateway) answerInputs(ctx context.Context, sc *scope, server, method string, params, res json.RawMessage) (json.RawMessage, error) {
	for round := 0; mcpwire.ResultTypeOf(res) == mcpwire.ResultInputRequired; round++ {
		if round == maxInputRounds {
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream %s asked for input more than %d times for one call", server, maxInputRounds)
		}
		reqs, _ := jsonrpc.Get(res, mcpwire.FieldInputRequests)
		type input struct {
			key, method string
			params      json.RawMessage
			ans         json.RawMessage
			err         *jsonrpc.Error
		}
		var inputs []*input
		var failed *jsonrpc.Error
		err := jsonrpc.Fields(reqs, func(key string, req []byte) bool {
			m, _ := jsonrpc.GetString(req, "method")
			p, _ := jsonrpc.Get(req, "params")
			if !mcpwire.IsInputRequestMethod(m) || !sc.caps.Allows(m) {
				failed = jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "upstream %s needs %s, which this client does not support", server, m)
				return false
			}
			if len(inputs) == maxUpstreamQuestions {
				failed = jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream %s asked too many questions at once", server)
				return false
			}
			inputs = append(inputs, &input{key: key, method: m, params: json.RawMessage(p)})
			return true
		})
		if failed != nil {
			return nil, &clientError{failed}
		}
		if err != nil {
			return nil, &upstream.Error{Server: server, Kind: upstream.KindInvalidResponse, Err: err}
		}
		// Asked all at once, as the upstream asked them: the client may
		// answer them in any order (a task's client sees them together
		// in inputRequests).
		var wg sync.WaitGroup
		for _, in := range inputs {
			wg.Go(func() {
				req := jsonrpc.NewRequest(jsonrpc.Int64ID(0), in.method, in.params)
				if sc.task != nil {
					in.ans, in.err = sc.task.ask(ctx, req)
				} else {
					in.ans, in.err = g.askDownstream(ctx, sc, req)
				}
			})
		}
		wg.Wait()
		responses := []byte{'{'}
		for _, in := range inputs {
			if in.err != nil {
				return nil, &clientError{in.err}
			}
			if len(responses) > 1 {
				responses = append(responses, ',')
			}
			responses = append(jsonrpc.AppendString(responses, in.key), ':')
			responses = append(responses, in.ans...)
		}
		responses = append(responses, '}')
		retry, err := jsonrpc.Set(params, mcpwire.FieldInputResponses, responses)
		if err != nil {
			return nil, err
		}
		if state, ok := jsonrpc.Get(res, mcpwire.FieldRequestState); ok {
			if retry, err = jsonrpc.Set(retry, mcpwire.FieldRequestState, state); err != nil {
				return nil, err
			}
		}
		if res, err = g.up.Call(upstream.WithClientCapabilities(upstream.WithOrigin(ctx, sc), relayableCaps(sc)), server, method, retry); err != nil {
			return nil, err
		}
	}
	return res, nil
}
