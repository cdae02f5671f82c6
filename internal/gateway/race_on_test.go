//go:build race

package gateway

// raceEnabled: built with -race, which changes what the heap holds.
const raceEnabled = true
