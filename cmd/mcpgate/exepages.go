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

// exePages reads exePagesEnv: the mode of the trim once serving, and
// whether to trim at all. About half of the gateway's peak RSS was its
// executable, most of it start-up code and data serving never touches
// again, mapped in fault-around windows (internal/exepages). By default
// (trim) the read-only data's pages also leave the page cache where
// nothing maps them, so serving maps the function tables and type data
// it reads a page at a time rather than in 64 KiB windows; unmap keeps
// the page cache, for an executable on storage slow enough that reading
// those pages once matters. docs/benchmarks.md "Where the peak RSS goes"
// has the numbers.
func exePages(getenv func(string) string, log *slog.Logger) (mode exepages.Mode, on bool) {
	switch v := getenv(exePagesEnv); v {
	case "", "trim":
		return exepages.Evict, true
	case "unmap":
		return exepages.Unmap, true
	case "keep":
		return 0, false
	default:
		log.Warn(exePagesEnv+" is trim (the default), unmap or keep; keeping the executable's pages", "value", v)
		return 0, false
	}
}

// slowTrim is how long a trim may take before it is logged as a warning.
var slowTrim = time.Second

// trimExecutable runs one trim and logs what it did; stage names it.
// serve trims twice: with exepages.Unmap once the config is read, before
// the store, the gateway and the listener are built, so that the start's
// peak is the package inits' rather than everything start-up touched
// (the pages it then uses fault back from the page cache), and with the
// configured mode once listening.
func trimExecutable(mode exepages.Mode, stage string, log *slog.Logger) {
	trimWith(exepages.Trim, mode, stage, log)
}

// trimWith is trimExecutable with the trim to run.
func trimWith(trim func(exepages.Mode) (uint64, error), mode exepages.Mode, stage string, log *slog.Logger) {
	start := time.Now()
	n, err := trim(mode)
	took := time.Since(start)
	switch {
	case errors.Is(err, exepages.ErrUnsupported):
	case err != nil:
		log.Warn("could not trim all of the executable's start-up pages; the rest stay mapped or cached", "stage", stage, "err", err)
	case took > slowTrim:
		// The serving trim waits for a freshly written executable's
		// read-only data to reach the disk (exepages.Trim): on slow
		// storage that delays serving, which an operator should see.
		log.Warn("trimming the executable's start-up pages was slow: it waited for the executable's pages to be written back (a binary written just before it started, on slow storage)",
			"stage", stage, "mapped_bytes", n, "took", took)
	default:
		log.Debug("trimmed the executable's start-up pages", "stage", stage, "mapped_bytes", n, "took", took)
	}
}
