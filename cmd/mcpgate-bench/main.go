// Command mcpgate-bench is a load generator for MCP servers and gateways
// that speak the streamable HTTP transport. Each worker opens its own session
// and then calls one tool back to back; see package bench/loadgen.
//
//	mcpgate-bench -url http://127.0.0.1:4200/mcp -c 8 -d 5s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/mcpgate/mcpgate/bench/loadgen"
)

type headerFlag http.Header

func (h headerFlag) String() string { return "" }
func (h headerFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Errorf("want Name: value, got %q", s)
	}
	http.Header(h).Add(strings.TrimSpace(k), strings.TrimSpace(v))
	return nil
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	fs := flag.NewFlagSet("mcpgate-bench", flag.ContinueOnError)
	var (
		o       loadgen.Options
		argJSON string
		asJSON  bool
	)
	o.Header = http.Header{}
	fs.StringVar(&o.URL, "url", "http://127.0.0.1:4200/mcp", "MCP endpoint (streamable HTTP)")
	fs.IntVar(&o.Concurrency, "c", 8, "workers (sessions), each with one request in flight")
	fs.DurationVar(&o.Duration, "d", 10*time.Second, "measured duration")
	fs.Int64Var(&o.Calls, "n", 0, "stop after this many measured calls instead of -d")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "unmeasured warmup before -d starts")
	fs.StringVar(&o.Tool, "tool", "echo", "tool to call")
	fs.StringVar(&argJSON, "args", "", `tool arguments as a JSON object (default {"text":"hello"} for echo, else {})`)
	fs.StringVar(&o.ProtocolVersion, "protocol", loadgen.DefaultProtocolVersion, "protocol version asked for in initialize")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.Var(headerFlag(o.Header), "H", "extra request header `Name: value` (repeatable)")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if argJSON != "" {
		if err := json.Unmarshal([]byte(argJSON), &o.Arguments); err != nil {
			fmt.Fprintf(os.Stderr, "mcpgate-bench: -args: %v\n", err)
			return 2
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := loadgen.Run(ctx, o)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "mcpgate-bench: %v\n", err)
		return 1
	}
	if asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Println(string(b))
	} else {
		fmt.Println(res)
		for _, s := range res.ErrorSamples {
			fmt.Println("error:", s)
		}
	}
	if res.Errors > 0 {
		return 1
	}
	return 0
}
