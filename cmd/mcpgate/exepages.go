package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/mcpgate/mcpgate/internal/exepages"
)

// exePagesEnv chooses what happens to the executable's start-up pages:
// trim (the default), unmap (the page cache keeps them) or keep.
const exePagesEnv = "MCPGATE_EXE_PAGES"

// trimExecutable drops the mappings of the executable's read-only pages
// once serve is listening (internal/exepages), unless exePagesEnv is
// "keep". About half of the gateway's peak RSS was its executable, most
// of it start-up code and data serving never touches again, mapped in
// fault-around windows. By default (trim) the read-only data's pages
// also leave the page cache where nothing maps them, so serving maps the
// function tables and type data it reads a page at a time rather than in
// 64 KiB windows; unmap keeps the page cache, for an executable on
// storage slow enough that reading those pages once matters.
// docs/benchmarks.md "Where the peak RSS goes" has the numbers.
func trimExecutable(getenv func(string) string, log *slog.Logger) {
	mode := exepages.Evict
	switch v := getenv(exePagesEnv); v {
	case "", "trim":
	case "unmap":
		mode = exepages.Unmap
	case "keep":
		return
	default:
		log.Warn(exePagesEnv+" is trim (the default), unmap or keep; keeping the executable's pages", "value", v)
		return
	}
	start := time.Now()
	n, err := exepages.Trim(mode)
	switch {
	case errors.Is(err, exepages.ErrUnsupported):
	case err != nil:
		log.Warn("could not trim all of the executable's start-up pages; the rest stay mapped or cached", "err", err)
	default:
		log.Debug("trimmed the executable's start-up pages", "mapped_bytes", n, "took", time.Since(start))
	}
}
