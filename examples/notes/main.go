// Command notes is a small MCP server over stdio that keeps notes, in memory
// or in a JSON file (-file, or $NOTES_FILE).
//
// Tools: add_note, list_notes, get_note, delete_note, search_notes.
// Resources: each note as notes://<title>, and the template notes://{title}.
// Prompt: summarize_notes. Logs go to stderr; stdout carries the protocol.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	file := flag.String("file", os.Getenv("NOTES_FILE"), "JSON file to keep the notes in (default $NOTES_FILE; empty: memory only)")
	verbose := flag.Bool("v", false, "log protocol activity")
	flag.Parse()

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(logger)

	store, err := OpenStore(*file)
	if err != nil {
		logger.Error("opening notes", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newServer(store, logger).Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
		logger.Error("server", "err", err)
		os.Exit(1)
	}
}
