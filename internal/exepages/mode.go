package exepages

// Mode is what Trim does with the pages it drops from the process's
// mappings.
type Mode int

const (
	// Unmap leaves the executable's pages in the page cache: what the
	// process uses again faults back in without a disk read, with the
	// cached pages around it.
	Unmap Mode = iota
	// Evict also drops the page cache of the executable's read-only data
	// where no process maps it, and reads that data a page at a time from
	// then on (see Trim).
	Evict
)
