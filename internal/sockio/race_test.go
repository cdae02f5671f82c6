//go:build race

package sockio

const raceEnabled = true
