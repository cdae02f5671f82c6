// Package exepages gives back the page table entries of the gateway's own
// executable once it has started, so that its resident set holds the
// pages of the executable it runs while serving, not every page start-up
// touched.
//
// Linux maps a file-backed page fault's neighbours too ("fault-around",
// 64 KiB or a large folio), and a start runs code and reads type data
// that serving never does again: the runtime and a few hundred package
// inits, the config, the store's migrations. Trim drops the mappings of
// the executable's read-only pages (MADV_DONTNEED); the page cache keeps
// them, and the ones serving needs fault back in from it on first use.
//
// The package owns that one call. It must never drop a page the file
// does not hold (a private copy: relocations, breakpoints), never touch
// writable mappings, and it does nothing outside Linux.
package exepages
