package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"
	_ "time/tzdata" // so that "now" knows every timezone on any machine

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxSleep bounds the sleep tool.
const maxSleep = 60 * time.Second

type binaryArgs struct {
	A float64 `json:"a" jsonschema:"the first operand"`
	B float64 `json:"b" jsonschema:"the second operand"`
}

type numberResult struct {
	Result float64 `json:"result"`
}

type nowArgs struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"IANA timezone name, e.g. Europe/Paris (default UTC)"`
}

type nowResult struct {
	Time     string `json:"time"`
	Timezone string `json:"timezone"`
	Unix     int64  `json:"unix"`
}

type sleepArgs struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep (at most 60000)"`
}

type sleepResult struct {
	SleptMS int64 `json:"slept_ms"`
}

// newServer returns the calc MCP server.
func newServer(logger *slog.Logger) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "calc", Title: "Calculator", Version: "1.0.0"}, &mcp.ServerOptions{
		Instructions: "Arithmetic on two numbers, the current time, and a sleep that reports progress.",
		Logger:       logger,
	})
	arith := func(name, desc string, op func(a, b float64) (float64, error)) {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: desc},
			func(ctx context.Context, req *mcp.CallToolRequest, in binaryArgs) (*mcp.CallToolResult, numberResult, error) {
				r, err := op(in.A, in.B)
				if err != nil {
					return nil, numberResult{}, err // reported as isError: true
				}
				return text(strconv.FormatFloat(r, 'g', -1, 64)), numberResult{r}, nil
			})
	}
	arith("add", "Add two numbers: a + b.", func(a, b float64) (float64, error) { return a + b, nil })
	arith("subtract", "Subtract two numbers: a - b.", func(a, b float64) (float64, error) { return a - b, nil })
	arith("multiply", "Multiply two numbers: a * b.", func(a, b float64) (float64, error) { return a * b, nil })
	arith("divide", "Divide two numbers: a / b. Dividing by zero is an error.", divide)
	mcp.AddTool(s, &mcp.Tool{Name: "now", Description: "The current time, in a timezone (default UTC)."}, now)
	mcp.AddTool(s, &mcp.Tool{Name: "sleep", Description: "Sleep for ms milliseconds, sending progress notifications if the request has a progress token."}, sleep)
	return s
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func divide(a, b float64) (float64, error) {
	if b == 0 {
		return 0, errors.New("division by zero")
	}
	r := a / b
	if math.IsInf(r, 0) {
		return 0, errors.New("result overflows")
	}
	return r, nil
}

// clock is the time source of the now tool.
var clock = time.Now

func now(ctx context.Context, req *mcp.CallToolRequest, in nowArgs) (*mcp.CallToolResult, nowResult, error) {
	tz := in.Timezone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, nowResult{}, fmt.Errorf("unknown timezone %q", tz)
	}
	t := clock().In(loc)
	s := t.Format(time.RFC3339)
	return text(s), nowResult{Time: s, Timezone: loc.String(), Unix: t.Unix()}, nil
}

// progressSteps is how many progress notifications a sleep sends at most.
const progressSteps = 10

func sleep(ctx context.Context, req *mcp.CallToolRequest, in sleepArgs) (*mcp.CallToolResult, sleepResult, error) {
	d := time.Duration(in.MS) * time.Millisecond
	if d < 0 || d > maxSleep {
		return nil, sleepResult{}, fmt.Errorf("ms must be between 0 and %d", maxSleep.Milliseconds())
	}
	token := req.Params.GetProgressToken()
	start := time.Now()
	steps := progressSteps
	if token == nil || d == 0 {
		steps = 1
	}
	for i := 1; i <= steps; i++ {
		t := time.NewTimer(time.Until(start.Add(d * time.Duration(i) / time.Duration(steps))))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, sleepResult{}, ctx.Err()
		case <-t.C:
		}
		if token != nil {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      float64(i),
				Total:         float64(steps),
				Message:       fmt.Sprintf("slept %dms of %dms", (d * time.Duration(i) / time.Duration(steps)).Milliseconds(), d.Milliseconds()),
			})
			if err != nil {
				slog.Debug("progress notification", "err", err)
			}
		}
	}
	slept := time.Since(start).Milliseconds()
	return text(fmt.Sprintf("slept %dms", slept)), sleepResult{SleptMS: slept}, nil
}

// newHandler returns the HTTP handler serving the MCP endpoint at /mcp.
func newHandler(logger *slog.Logger) http.Handler {
	s := newServer(logger)
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{
		Logger:         logger,
		SessionTimeout: 30 * time.Minute,
	}))
	return mux
}
