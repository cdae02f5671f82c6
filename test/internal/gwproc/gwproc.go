// Package gwproc runs the real mcpgate binary as a child process for the
// suites that test it from outside (test/chaos, test/security): build it
// once, start `mcpgate serve` with a config, learn the address it serves on
// from its JSON log, and keep that log for assertions and failure reports.
//
// It owns the child process and its log only. It knows nothing of MCP, of
// the gateway's packages or of what a suite asserts, and it must not import
// them: the suites learn everything from outside, as an operator would.
package gwproc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// BinDirEnv names the directory the suites build their binaries into,
// when set. scripts/test.sh sets it for its whole run and builds the
// binaries there first: each suite's go build then finds them up to date
// and links nothing, where a fresh directory per suite would link mcpgate
// again (about 6 CPU-seconds each). The suites still go build, so a binary
// older than its source is never run.
const BinDirEnv = "MCPGATE_TEST_BIN_DIR"

// BinDir answers the directory to build binaries into: $MCPGATE_TEST_BIN_DIR
// when set (shared with other suites: cleanup leaves it, and no suite may
// write anything but its go build output there), else a new temporary
// directory named after pattern, which cleanup removes.
func BinDir(pattern string) (dir string, cleanup func(), err error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", nil, err
		}
		return d, func() {}, nil
	}
	if dir, err = os.MkdirTemp("", pattern); err != nil {
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// Build runs `go build -o dir/` for pkgs (import paths or directories
// relative to the caller's working directory), its output on stderr.
func Build(dir string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", strings.Join(pkgs, " "), err)
	}
	return nil
}

// servingRE is the log line serve writes once it listens.
var servingRE = regexp.MustCompile(`"msg":"mcpgate serving".*"addr":"http://([^/"]+)/mcp"`)

// Proc is a running mcpgate.
type Proc struct {
	Cmd  *exec.Cmd
	Base string // http://host:port the gateway serves on
	// Exited is closed when the process has exited, ExitErr set then.
	Exited  chan struct{}
	ExitErr error

	mu   sync.Mutex
	logs []string
}

// Start runs bin with args (they must include --log-format json), keeps
// its stderr as the log, and waits up to within for the serving line. On
// failure the process is killed and the error carries the log's tail.
func Start(bin string, args []string, within time.Duration) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, Exited: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs = append(p.logs, line)
			p.mu.Unlock()
			if m := servingRE.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	go func() { p.ExitErr = cmd.Wait(); close(p.Exited) }()
	select {
	case a := <-addr:
		p.Base = "http://" + a
		return p, nil
	case <-p.Exited:
		return nil, fmt.Errorf("gateway exited at start: %v\n%s", p.ExitErr, p.Tail(40))
	case <-time.After(within):
		p.Kill()
		return nil, fmt.Errorf("gateway did not serve within %v\n%s", within, p.Tail(40))
	}
}

// Kill ends the process (SIGKILL) unless it has exited, and waits for it.
func (p *Proc) Kill() {
	select {
	case <-p.Exited:
	default:
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// Tail is the last n lines of the log.
func (p *Proc) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := p.logs
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Lines is the log lines containing s (all of them for "").
func (p *Proc) Lines(s string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.logs {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
