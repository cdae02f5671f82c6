// Command quickstart runs mcpgate on the example configuration with no
// network and nothing but Go installed:
//
//	go run ./examples/quickstart
//
// It builds bin/mcpgate, bin/notes and bin/calc, starts the calc example
// server (streamable HTTP on 127.0.0.1:4100), then runs
// `bin/mcpgate serve --config examples/quickstart.yaml`, which launches the
// notes example server over stdio. Ctrl-C stops everything.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(root, "bin")
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "quickstart: building bin/mcpgate, bin/notes, bin/calc")
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./cmd/mcpgate", "./examples/notes", "./examples/calc")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	calc := exec.Command(filepath.Join(bin, "calc"), "-listen", "127.0.0.1:4100")
	calc.Stdout, calc.Stderr = os.Stderr, os.Stderr
	if err := calc.Start(); err != nil {
		return fmt.Errorf("start calc: %w", err)
	}
	defer func() {
		_ = calc.Process.Signal(syscall.SIGTERM)
		_ = calc.Wait()
	}()
	if err := waitListening("127.0.0.1:4100", 10*time.Second); err != nil {
		return fmt.Errorf("calc did not start: %w", err)
	}

	gw := exec.Command(filepath.Join(bin, "mcpgate"), "serve", "--config", filepath.Join(root, "examples", "quickstart.yaml"))
	gw.Stdout, gw.Stderr = os.Stdout, os.Stderr
	if err := gw.Start(); err != nil {
		return fmt.Errorf("start mcpgate: %w", err)
	}
	fmt.Fprintln(os.Stderr, "quickstart: mcpgate on http://127.0.0.1:4000/mcp (tools notes__* and calc__*); Ctrl-C to stop")
	// No keys and a loopback listener: the console opens without one.
	fmt.Fprintln(os.Stderr, "quickstart: console on http://127.0.0.1:4000/ui/ (open it in a browser on this machine; no key needed)")
	done := make(chan error, 1)
	go func() { done <- gw.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = gw.Process.Signal(syscall.SIGTERM)
		return <-done
	}
}

// repoRoot finds the directory holding go.mod, from the working directory up.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "examples", "quickstart.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("run this from inside the mcpgate repository")
		}
		dir = parent
	}
}

func waitListening(addr string, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
