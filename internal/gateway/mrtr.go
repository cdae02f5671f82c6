package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcpgate/mcpgate/internal/jsonrpc"
	"github.com/mcpgate/mcpgate/internal/mcpwire"
	"github.com/mcpgate/mcpgate/internal/metrics"
)

// Era bridging, S18.1: an handshake-era upstream sends a server-initiated
// request (elicitation, sampling, roots/list) while serving a 2026-07-28
// client's call. That client takes no server-initiated requests: its call
// is answered input_required with the request, and a requestState the
// gateway minted; the client's retry with inputResponses answers the
// upstream's pending request, and the original call goes on. The call
// itself keeps running between the two HTTP requests; a retry that never
// comes ends it after exchangeWait.

// gatherWindow is how long a round waits, after the upstream's first
// question, for others asked at the same time.
const gatherWindow = 20 * time.Millisecond

// exchangeWait bounds how long an upstream's question waits for the
// client's retry.
const exchangeWait = 2 * time.Minute

// exchange is one call in progress across input_required rounds.
type exchange struct {
	id      string
	owner   string
	asks    chan *question // the upstream's requests, one at a time
	done    chan *jsonrpc.Message
	seq     atomic.Int64
	mu      sync.Mutex
	pending map[string]*question // asked, not yet answered, by key
	out     *roundSender
	cancel  context.CancelFunc // ends the call
	// round is the last round a requestState was minted for; spent the
	// last one a retry has used. Only the latest round's state resumes
	// the call, and only once.
	round, spent atomic.Int64
	// gone is closed when no client will answer any more (the call ended
	// for want of a capability, or the gateway is shutting down):
	// questions fail at once instead of waiting.
	gone     chan struct{}
	goneOnce sync.Once
	// missing carries the capability an upstream request needed that the
	// client did not declare: the call ends with -32021.
	missing chan string
	// method and params are what a retry must repeat (mrtr.md: the same
	// method and params). params is kept raw: most calls never see a
	// retry, so it is decoded for the comparison only when one comes.
	method string
	params json.RawMessage
}

// retryMembers are the params members that change from round to round.
var retryMembers = []string{mcpwire.FieldMeta, mcpwire.FieldInputResponses, mcpwire.FieldRequestState}

// requestOf decodes params without the members a retry changes, for a
// comparison that ignores spelling (key order, whitespace).
func requestOf(params json.RawMessage) any {
	var v map[string]any
	if json.Unmarshal(params, &v) != nil {
		return nil
	}
	for _, k := range retryMembers {
		delete(v, k)
	}
	return v
}

// end fails the exchange's open and future questions.
func (ex *exchange) end() {
	ex.goneOnce.Do(func() { close(ex.gone) })
}

// maxHeld bounds the messages an exchange keeps for its next round.
const maxHeld = 64

// roundSender carries what a call sends its client besides the result
// (progress, log messages) to the HTTP request of the current round: the
// first request's stream ends with its input_required answer, and the
// retry's stream takes over. Messages sent between rounds wait for the
// retry, the newest maxHeld of them.
//
// Progress carries the progress token of the request the client is
// waiting on: a retry may bring a token of its own (clients make one per
// request), and the client drops progress with the first request's
// token once that request is answered. The token is put in when the
// message goes out, so held progress takes the retry's.
type roundSender struct {
	mu   sync.Mutex
	cur  sender
	held []*jsonrpc.Message
	// token is the current round's request's progressToken; nil: it
	// asked for no progress, and none is sent on it.
	token json.RawMessage
}

// progressTokenOf is the progressToken of a request's params, nil for
// none.
func progressTokenOf(params json.RawMessage) json.RawMessage {
	tok, ok := jsonrpc.GetPath(params, mcpwire.FieldMeta, "progressToken")
	if !ok || len(tok) == 0 || string(tok) == "null" {
		return nil
	}
	return append(json.RawMessage(nil), tok...)
}

// deliver sends msg on s as the current round's request would have it.
// rs.mu is held.
func (rs *roundSender) deliver(s sender, msg *jsonrpc.Message) error {
	if msg.Method == mcpwire.NotifyProgress {
		if rs.token == nil {
			return nil // this round's request asked for no progress
		}
		params, err := jsonrpc.Set(msg.Params, "progressToken", rs.token)
		if err != nil {
			return nil
		}
		msg = jsonrpc.NewNotification(msg.Method, params)
	}
	return s.send(msg)
}

func (rs *roundSender) send(msg *jsonrpc.Message) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.cur != nil && rs.deliver(rs.cur, msg) == nil {
		return nil
	}
	if len(rs.held) == maxHeld {
		rs.held = append(rs.held[:0], rs.held[1:]...)
	}
	rs.held = append(rs.held, msg)
	return nil
}

// attach makes s the current round's stream, for a request with progress
// token token (nil: none), and hands it what was held.
func (rs *roundSender) attach(s sender, token json.RawMessage) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.cur, rs.token = s, token
	held := rs.held
	rs.held = nil
	for i, msg := range held {
		if rs.deliver(s, msg) != nil {
			rs.held = held[i:]
			return
		}
	}
}

type question struct {
	key    string
	method string
	params json.RawMessage
	answer chan json.RawMessage
}

// needs ends the call for want of a client capability (the first one
// wins; the call is over after it).
func (ex *exchange) needs(capability string) {
	select {
	case ex.missing <- capability:
	default:
	}
}

// ask hands an upstream request to the client's next round and waits for
// the answer, at most exchangeWait in all.
func (ex *exchange) ask(ctx context.Context, msg *jsonrpc.Message) (json.RawMessage, *jsonrpc.Error) {
	q := &question{key: "q" + strconv.FormatInt(ex.seq.Add(1), 10), method: msg.Method, params: msg.Params, answer: make(chan json.RawMessage, 1)}
	t := time.NewTimer(exchangeWait)
	defer t.Stop()
	unanswered := func() *jsonrpc.Error {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "the client did not answer %s within %s", msg.Method, exchangeWait)
	}
	gone := func() *jsonrpc.Error {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "the client cannot answer %s any more (its call ended, or the gateway is shutting down)", msg.Method)
	}
	select {
	case ex.asks <- q:
	case <-t.C:
		return nil, unanswered()
	case <-ex.gone:
		return nil, gone()
	case <-ctx.Done():
		return nil, jsonrpc.NewError(-32800, "Request cancelled")
	}
	defer func() {
		ex.mu.Lock()
		delete(ex.pending, q.key)
		ex.mu.Unlock()
	}()
	select {
	case a := <-q.answer:
		return a, nil
	case <-t.C:
		return nil, unanswered()
	case <-ex.gone:
		return nil, gone()
	case <-ctx.Done():
		return nil, jsonrpc.NewError(-32800, "Request cancelled")
	}
}

// stateKey signs requestState values without fleet.session_keys (with
// them they are sealed under the ring: fleet.go); it lives as long as
// the process, as do the exchanges it protects.
var stateKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

const statePrefix = "mcpg1."

// mintState is the requestState of an exchange's next round: its id, the
// round and the caller's owner fingerprint, signed, so that it cannot be
// forged, is worthless to anyone else, and names one round only (an
// earlier round's state is spent).
func mintState(ex *exchange) string {
	round := strconv.FormatInt(ex.round.Add(1), 10)
	return statePrefix + ex.id + "." + round + "." + stateMAC(ex.id, round, ex.owner)
}

func stateMAC(id, round, owner string) string {
	mac := hmac.New(sha256.New, stateKey)
	mac.Write([]byte(id + "\x00" + round + "\x00" + owner))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// openState verifies a requestState for owner and returns its exchange id
// and round.
func openState(state, owner string) (id string, round int64, ok bool) {
	rest, ok := strings.CutPrefix(state, statePrefix)
	if !ok {
		return "", 0, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", 0, false
	}
	round, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || round < 1 {
		return "", 0, false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(stateMAC(parts[0], parts[1], owner))) {
		return "", 0, false
	}
	return parts[0], round, true
}

// startExchange runs the call of a 2026-07-28 client in the background, so
// that it can outlive this HTTP request if the upstream asks a question.
// The exchange is the caller's on sc's route (sc.party): a retry of
// anyone else, or on another route, does not resume it.
func (g *Gateway) startExchange(ctx context.Context, sc *scope, m *jsonrpc.Message) *exchange {
	var b [12]byte
	_, _ = rand.Read(b[:])
	ex := &exchange{id: hex.EncodeToString(b[:]), owner: sc.owner, asks: make(chan *question), done: make(chan *jsonrpc.Message, 1), pending: map[string]*question{}, gone: make(chan struct{}), missing: make(chan string, 1)}
	ex.method, ex.params = m.Method, m.Params
	forget := g.exchanges.put(ex.id, sc.party(), ex)
	sc.exchange = ex
	ex.out = &roundSender{cur: sc.out, token: progressTokenOf(m.Params)}
	sc.out = ex.out
	// The call must not end with the first HTTP request; it is bounded by
	// the upstream's timeout and by exchangeWait for each question.
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ex.cancel = cancel
	// A task: Close waits for it, after the upstreams it may wait on
	// closed.
	started := g.tasks.start(func() {
		defer cancel()
		// The call's own upstream sessions (relay.go) end with it.
		defer g.up.Unbind(exchangeBinding(ex))
		ex.done <- g.serve(cctx, sc, m)
		// Over. The request waiting on it takes the reply from done and
		// forgets the exchange (awaitExchange). But an upstream may ask a
		// question and then finish without waiting for its answer (an
		// handshake-era server's own roots/list beside the call's): the client
		// then holds a requestState for a round whose retry must get the
		// result, not "expired". So once any question was asked, an
		// unclaimed exchange is kept for one more exchangeWait.
		if ex.seq.Load() > 0 {
			time.AfterFunc(exchangeWait, forget)
		}
	})
	if !started {
		cancel()
		ex.done <- jsonrpc.NewErrorResponse(m.ID, jsonrpc.NewError(jsonrpc.CodeInternalError, "Gateway is shutting down"))
	}
	return ex
}

// awaitExchange waits for the call's next step: its reply, or a question
// the client must answer first (answered as input_required). It returns
// the reply to send.
func (g *Gateway) awaitExchange(ctx context.Context, ex *exchange, id jsonrpc.ID) *jsonrpc.Message {
	select {
	case reply := <-ex.done:
		g.exchanges.drop(ex.id)
		reply.ID = id
		return reply
	case q := <-ex.asks:
		// An upstream often asks several things at once (go-sdk sends an
		// input_required result's requests concurrently): gather what
		// arrives within gatherWindow (g.gather), so that the client
		// answers them in one round.
		qs := []*question{q}
		gather := time.NewTimer(g.gather)
		defer gather.Stop()
	more:
		for {
			select {
			case q := <-ex.asks:
				qs = append(qs, q)
			case capability := <-ex.missing:
				// Something undeclared decides the round (below) whatever
				// else comes: no need to wait out the window for it.
				return g.missingCapability(ex, id, capability)
			case <-gather.C:
				break more
			}
		}
		select {
		case capability := <-ex.missing:
			// Asked at the same time as something undeclared: the
			// undeclared need decides, whichever arrived first.
			return g.missingCapability(ex, id, capability)
		default:
		}
		ex.mu.Lock()
		for _, q := range qs {
			ex.pending[q.key] = q
		}
		ex.mu.Unlock()
		return jsonrpc.NewResult(id, g.inputRequired(ex, qs))
	case capability := <-ex.missing:
		return g.missingCapability(ex, id, capability)
	case <-ctx.Done():
		// The client went away while no question of the call was out, so
		// no requestState can bring it back: closing the stream is how a
		// client of this era cancels, and the call is cancelled upstream.
		// (Between rounds no request is open; a question whose retry never
		// comes fails after exchangeWait, see ask.)
		g.exchanges.drop(ex.id)
		ex.cancel()
		return nil
	}
}

// missingCapability ends a call whose upstream needs a capability the
// client did not declare in its request: the call cannot go on, and the
// client learns what to declare (-32021, S17).
func (g *Gateway) missingCapability(ex *exchange, id jsonrpc.ID, capability string) *jsonrpc.Message {
	g.exchanges.drop(ex.id)
	ex.end()
	ex.cancel()
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{capability: map[string]any{}}})
	return jsonrpc.NewErrorResponse(id, &jsonrpc.Error{Code: mcpwire.CodeMissingRequiredClientCapability,
		Message: "Missing required client capability: " + capability, Data: data})
}

// inputRequired is the input_required result asking the client qs.
func (g *Gateway) inputRequired(ex *exchange, qs []*question) json.RawMessage {
	res := []byte(`{"resultType":"input_required","inputRequests":{`)
	for i, q := range qs {
		if i > 0 {
			res = append(res, ',')
		}
		res = append(jsonrpc.AppendString(res, q.key), `:{"method":`...)
		res = jsonrpc.AppendString(res, q.method)
		// params always: the schema lets roots/list go without, but
		// clients (go-sdk v1.8.0) fail to read an input request that has
		// none.
		params := q.params
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage("{}")
		}
		res = append(append(res, `,"params":`...), params...)
		res = append(res, '}')
	}
	res = append(res, `},"requestState":`...)
	return append(jsonrpc.AppendString(res, g.mintState(ex)), '}')
}

func errStateSpent() *jsonrpc.Error {
	return errInvalidParams("Invalid params: requestState expired or already used; send the request again without it")
}

// endExchanges fails every question still waiting for a client (on
// shutdown: no retry will come), so the calls behind them finish.
func (g *Gateway) endExchanges() {
	g.exchanges.each((*exchange).end)
}

// resumeExchange takes a retry carrying requestState and inputResponses,
// from party by: it checks the state against the caller (its MAC) and the
// exchange against the caller on this route, answers the pending
// questions, and returns the exchange to wait on.
func (g *Gateway) resumeExchange(method string, params json.RawMessage, by party, out sender) (*exchange, []*question, *jsonrpc.Error) {
	state, _ := jsonrpc.GetString(params, mcpwire.FieldRequestState)
	exID, round, ok := g.openState(state, by.owner)
	if !ok {
		return nil, nil, errInvalidParams("Invalid params: requestState was not issued to this caller")
	}
	ex, ok, foreign := g.exchanges.get(exID, by)
	if foreign {
		// The caller's own state, on another route than its call's: its
		// answers are for the call as that route let it run.
		g.metrics.SecurityRefusal(metrics.RefusedForeignRetry)
		return nil, nil, errInvalidParams("Invalid params: requestState was not issued on this route; retry where the request was first sent")
	}
	if !ok {
		return nil, nil, errStateSpent()
	}
	if method != ex.method || !reflect.DeepEqual(requestOf(params), requestOf(ex.params)) {
		// The answers belong to the call that asked; resuming it for a
		// different request would hand this one the other's result.
		return nil, nil, errInvalidParams("Invalid params: a retry with requestState must repeat the original request (method and params)")
	}
	if round != ex.round.Load() || !ex.spent.CompareAndSwap(round-1, round) {
		// An earlier round's state, or this round's a second time: the
		// answers it carries were given, or are not the ones asked for.
		return nil, nil, errStateSpent()
	}
	resp, _ := jsonrpc.Get(params, mcpwire.FieldInputResponses)
	ex.mu.Lock()
	defer ex.mu.Unlock()
	var unanswered []*question
	for k, q := range ex.pending {
		a, ok := jsonrpc.Get(resp, k)
		if !ok {
			unanswered = append(unanswered, q)
			continue
		}
		q.answer <- json.RawMessage(a)
		delete(ex.pending, k)
	}
	// Questions the retry left unanswered are asked again (mrtr.md: a
	// missing answer is another input_required, not an error).
	sort.Slice(unanswered, func(i, j int) bool { return unanswered[i].key < unanswered[j].key })
	ex.out.attach(out, progressTokenOf(params))
	return ex, unanswered, nil
}
