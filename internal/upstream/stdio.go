package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/jsonrpc"
)

// stdio is the stdio client transport (C1.1): the server is a child
// process in its own process group, spoken to with newline-delimited JSON
// on its stdin and stdout; its stderr goes to the log.
type stdio struct {
	c   *conn
	cmd *exec.Cmd

	stdin  *os.File // our write end
	stdout *os.File // our read end
	stderr *os.File // our read end

	queue   chan outgoing // to the writer goroutine: writes are serialized
	stop    chan struct{} // closed by close: the writer exits
	exited  chan struct{} // closed once the process has been reaped
	readers sync.WaitGroup
	wg      sync.WaitGroup

	stdoutDone chan struct{}

	// A stateless session's subscriptions/listen request (listen.go):
	// its id while open, and the resources it subscribes.
	listenMu sync.Mutex
	listenN  int
	listenID string
	subs     map[string]bool
}

type outgoing struct {
	data []byte
	errc chan error
}

var _ transport = (*stdio)(nil)

// inheritedEnv are the variables a stdio server gets from the gateway's
// environment; everything else it needs comes from its config (C1.1). The
// gateway's own secrets are not passed on.
var inheritedEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ",
	"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TMPDIR",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
	// Windows needs these to run anything at all.
	"SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT",
	"USERPROFILE", "APPDATA", "LOCALAPPDATA", "PROGRAMFILES", "TEMP", "TMP",
}

// childEnv is the minimal safe environment with the configured variables
// on top.
func childEnv(extra map[string]string) []string {
	env := make([]string, 0, len(inheritedEnv)+len(extra))
	for _, k := range inheritedEnv {
		if _, override := extra[k]; override {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// startStdio starts the server process. No shell is involved: Command is
// executed directly with Args.
func startStdio(c *conn, srv *config.Server) error {
	if srv.Command == "" {
		return &Error{Server: c.server, Kind: KindInternal, Err: errors.New("stdio server has no command")}
	}
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Env = childEnv(srv.Env)
	cmd.Dir = srv.Cwd
	setProcessGroup(cmd)

	var files []*os.File // everything to close if the start fails
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	fail := func(err error) error {
		for _, f := range files {
			f.Close()
		}
		return &Error{Server: c.server, Kind: KindUnreachable, Err: fmt.Errorf("start %s: %w", srv.Command, err)}
	}
	inR, inW, err := pipe()
	if err != nil {
		return fail(err)
	}
	outR, outW, err := pipe()
	if err != nil {
		return fail(err)
	}
	errR, errW, err := pipe()
	if err != nil {
		return fail(err)
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	// The child has its copies; ours of its ends would keep the pipes open.
	inR.Close()
	outW.Close()
	errW.Close()

	t := &stdio{
		c:          c,
		cmd:        cmd,
		stdin:      inW,
		stdout:     outR,
		stderr:     errR,
		queue:      make(chan outgoing),
		stop:       make(chan struct{}),
		exited:     make(chan struct{}),
		stdoutDone: make(chan struct{}),
	}
	c.t = t
	c.log.Info("started stdio upstream", "command", srv.Command, "pid", cmd.Process.Pid)
	t.readers.Go(t.readStdout)
	t.readers.Go(t.readStderr)
	t.wg.Go(t.write)
	t.wg.Go(t.wait)
	return nil
}

// pid is the child's process id (tests).
func (t *stdio) pid() int { return t.cmd.Process.Pid }

// exitDrain is how long the stdout of an exited process may still be read:
// a reply written just before exit must not be lost, but a grandchild that
// keeps the pipe open must not keep the session alive.
const exitDrain = time.Second

// wait reaps the process and ends the session when it exits.
func (t *stdio) wait() {
	err := t.cmd.Wait()
	select {
	case <-t.stdoutDone:
	case <-time.After(exitDrain):
	}
	close(t.exited)
	state := "exited"
	if err != nil {
		state = err.Error()
	}
	t.c.shutdown(&Error{Server: t.c.server, Kind: KindClosed, Err: fmt.Errorf("%w: process %s", ErrClosed, state)})
	// The readers end at EOF once they have read what the process wrote
	// (its last stderr lines often say why it died: closing the pipe at
	// once lost them). Readers stuck on pipes a grandchild still holds
	// are unblocked after exitDrain.
	drained := make(chan struct{})
	go func() {
		t.readers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(exitDrain):
	}
	t.stdout.Close()
	t.stderr.Close()
	<-drained
}

// readStdout hands each line to the conn. Lines may be as long as
// MaxMessageBytes; a longer one is discarded as it is read (the framing
// survives it: see oversized.go) and fails the call it answers.
func (t *stdio) readStdout() {
	defer close(t.stdoutDone)
	br := bufio.NewReaderSize(t.stdout, 64<<10)
	var ov oversized
	for {
		line, err := readLineKeep(br, t.c.maxMsg, &ov)
		if errors.Is(err, errLineTooLong) {
			t.oversizedLine(&ov)
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			t.c.receiveData(line, nil)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				t.c.log.Debug("stdio read failed", "error", err)
			}
			return
		}
	}
}

// oversizedLine fails the call an over-long line answered, when its ends
// say which (oversized.go); a server's request or notification is only
// dropped. When nothing tells, every call in flight fails, as for any
// undecodable message (C6.5): none is left waiting for a reply that was
// thrown away.
func (t *stdio) oversizedLine(ov *oversized) {
	e := t.c.tooLarge()
	switch kind, id := classifyOversized(ov.head, ov.tail); kind {
	case oversizedReply:
		if !t.c.finish(id, callResult{err: e}) {
			t.c.log.Debug("oversized response for no pending request", "error", e.Err)
		}
	case oversizedInbound:
		t.c.log.Warn("upstream message dropped", "error", e.Err)
	default:
		t.c.badMessage(e, nil)
	}
}

var errLineTooLong = errors.New("line too long")

// readLine reads one '\n'-terminated line of at most max bytes (without
// the terminator) into a new slice: decoded messages alias it. A longer
// line is consumed and errLineTooLong returned.
func readLine(br *bufio.Reader, max int) ([]byte, error) { return readLineKeep(br, max, nil) }

// readLineKeep is readLine that keeps the ends of a line too long in ov
// (nil: not kept). Memory stays bounded by max and the reader's buffer
// whatever the line's length.
func readLineKeep(br *bufio.Reader, max int, ov *oversized) ([]byte, error) {
	frag, err := br.ReadSlice('\n')
	if err == nil {
		if len(frag)-1 > max {
			ov.reset(frag[:len(frag)-1])
			return nil, errLineTooLong
		}
		return bytes.Clone(frag[:len(frag)-1]), nil
	}
	if err != bufio.ErrBufferFull {
		return bytes.Clone(frag), err
	}
	// The line is gathered in copies of the reader's fragments, joined
	// once it is complete: an oversized one is dropped with no more held
	// than max, and none leaves behind the garbage of a growing slice.
	chunks := [][]byte{bytes.Clone(frag)}
	n := len(frag)
	for {
		frag, err = br.ReadSlice('\n')
		if n+len(frag) > max+1 {
			ov.reset(chunks[0])
			for _, c := range chunks[1:] {
				ov.add(c)
			}
			chunks = nil // free while the rest is read and discarded
			ov.add(frag)
			for err == bufio.ErrBufferFull {
				frag, err = br.ReadSlice('\n')
				ov.add(frag)
			}
			if err != nil {
				return nil, err
			}
			return nil, errLineTooLong
		}
		n += len(frag)
		if err == bufio.ErrBufferFull {
			chunks = append(chunks, bytes.Clone(frag))
			continue
		}
		line := make([]byte, 0, n)
		for _, c := range chunks {
			line = append(line, c...)
		}
		line = append(line, frag...)
		if err == nil {
			return line[:len(line)-1], nil
		}
		return line, err
	}
}

// maxStderrLine bounds one logged stderr line.
const maxStderrLine = 4 << 10

// readStderr logs the server's stderr line by line. Per the spec stderr
// is not an error channel, so lines are logged at info.
func (t *stdio) readStderr() {
	br := bufio.NewReaderSize(t.stderr, maxStderrLine)
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			t.c.log.Info("upstream stderr", "line", string(line)+"...")
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
		} else if l := bytes.TrimRight(line, "\r\n"); len(l) > 0 {
			t.c.log.Info("upstream stderr", "line", string(l))
		}
		if err != nil {
			return
		}
	}
}

// write is the only writer of stdin.
func (t *stdio) write() {
	for {
		select {
		case o := <-t.queue:
			_, err := t.stdin.Write(o.data)
			o.errc <- err
		case <-t.stop:
			return
		}
	}
}

// frame encodes m as one line. A message never contains a raw newline
// except as whitespace between tokens (pretty-printed params), which is
// compacted away.
func frame(m *jsonrpc.Message) ([]byte, error) {
	data := jsonrpc.Encode(m)
	if bytes.ContainsAny(data, "\r\n") {
		var buf bytes.Buffer
		buf.Grow(len(data) + 1)
		if err := json.Compact(&buf, data); err != nil {
			return nil, err
		}
		data = buf.Bytes()
	}
	return append(data, '\n'), nil
}

func (t *stdio) send(ctx context.Context, m *jsonrpc.Message, _ *call) error {
	data, err := frame(m)
	if err != nil {
		return &Error{Server: t.c.server, Kind: KindInternal, Err: fmt.Errorf("encode message: %w", err)}
	}
	o := outgoing{data: data, errc: make(chan error, 1)}
	closed := func() error { return &Error{Server: t.c.server, Kind: KindClosed, Err: ErrClosed} }
	select {
	case t.queue <- o:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.stop:
		return closed()
	case <-t.exited:
		return closed()
	}
	select {
	case err := <-o.errc:
		if err != nil {
			return &Error{Server: t.c.server, Kind: KindClosed, Err: fmt.Errorf("%w: write: %w", ErrClosed, err)}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err() // the write finishes (or fails) on its own
	}
}

// close ends the process (C11.1): stdin is closed, the process group gets
// SIGTERM, then SIGKILL after KillGrace; the process is always reaped.
func (t *stdio) close() error {
	close(t.stop)
	t.stdin.Close()
	select {
	case <-t.exited:
	default:
		signalGroup(t.cmd, false)
		select {
		case <-t.exited:
		case <-time.After(KillGrace):
			t.c.log.Warn("stdio upstream ignored SIGTERM; killing it", "grace", formatBudget(KillGrace))
			signalGroup(t.cmd, true)
			<-t.exited
		}
	}
	t.wg.Wait()
	return nil
}
