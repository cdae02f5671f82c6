package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/mcpgate/mcpgate/internal/exepages"
)

// exePagesEnv turns the executable's trim off: MCPGATE_EXE_PAGES=keep.
const exePagesEnv = "MCPGATE_EXE_PAGES"

// trimExecutable drops the mappings of the executable's read-only pages
// once serve is listening (internal/exepages), unless exePagesEnv is
// "keep". About half of the gateway's peak RSS was its executable, most
// of it start-up code and data serving never touches again, mapped in
// fault-around windows; the pages stay in the page cache and the ones
// serving runs fault back in once. docs/benchmarks.md "Where the peak RSS
// goes" has the numbers.
func trimExecutable(getenv func(string) string, log *slog.Logger) {
	switch v := getenv(exePagesEnv); v {
	case "", "trim":
	case "keep":
		return
	default:
		log.Warn(exePagesEnv+" is trim (the default) or keep; keeping the executable's pages", "value", v)
		return
	}
	start := time.Now()
	n, err := exepages.Trim()
	switch {
	case errors.Is(err, exepages.ErrUnsupported):
	case err != nil:
		log.Warn("could not trim the executable's start-up pages; they stay mapped", "err", err)
	default:
		log.Debug("trimmed the executable's start-up pages", "mapped_bytes", n, "took", time.Since(start))
	}
}
