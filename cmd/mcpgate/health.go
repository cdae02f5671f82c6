package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthCommand is a container health check: GET /readyz of the local
// gateway, exit 0 when it answers 200, else 1 with one line saying why.
// It needs no shell, curl or wget in the image (the distroless one has
// none), and no key: /readyz answers the status to anyone.
type healthCommand struct{ stdout io.Writer }

// defaultHealthTimeout bounds the check: a health check that hangs is
// one the orchestrator kills without a reason.
const defaultHealthTimeout = 5 * time.Second

// maxHealthAnswer bounds the /readyz answer read.
const maxHealthAnswer = 1 << 20

func (c *healthCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	var af adminFlags
	fs.StringVar(&af.url, "url", "", "base URL of the gateway (default: $MCPGATE_URL, else the config's listen address, else http://127.0.0.1:4000)")
	fs.StringVar(&af.config, "config", "", "config file whose listen address to check (default: $MCPGATE_CONFIG, else ./"+defaultConfigFile+" if there is one)")
	timeout := fs.Duration("timeout", defaultHealthTimeout, "give up after this long")
	if err := parseNoArgs(fs, "health [--url URL] [--timeout D]", args); err != nil {
		return err
	}
	if *timeout <= 0 {
		return &usageError{"--timeout must be positive"}
	}
	base, err := af.baseURL()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	target := base + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", target, err)
	}
	req.Header.Set("User-Agent", "mcpgate-cli/"+version())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%s: no answer within %s", target, *timeout)
		}
		return fmt.Errorf("%s: %w", target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHealthAnswer))
	if resp.StatusCode != http.StatusOK {
		why := "not ready"
		var r struct {
			Ready *bool `json:"ready"`
		}
		if json.Unmarshal(body, &r) != nil || r.Ready == nil {
			why = "not a gateway's /readyz answer"
		}
		return fmt.Errorf("%s: %s (HTTP %d %s)", target, why, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	_, err = fmt.Fprintln(c.stdout, "ready")
	return err
}
