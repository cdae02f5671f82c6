// Package exepages gives back the page table entries of the gateway's own
// executable once it has started, so that its resident set holds the
// pages of the executable it runs while serving, not every page start-up
// touched.
//
// Linux maps a file-backed page fault's neighbours too ("fault-around",
// 64 KiB or a large folio), and a start runs code and reads type data
// that serving never does again: the runtime and a few hundred package
// inits, the config, the store's migrations. Trim drops the mappings of
// the executable's read-only pages (MADV_DONTNEED). By default it also
// drops the page cache of the read-only data (the runtime's function
// tables, type data) where no process maps it, and reads that data a page
// at a time from then on: the runtime reads it a few bytes here and
// there (stack maps when it scans or grows a goroutine's stack), and a
// fault that found its neighbours cached mapped 64 KiB for each. It
// does that twice: a page the process reads back while the first pass
// runs keeps its whole folio cached. The code stays cached, and what
// serving runs faults back in from there.
//
// The package owns those calls. It must never drop a page the file
// does not hold (a private copy: relocations, breakpoints), never touch
// writable mappings, and it does nothing outside Linux.
package exepages
