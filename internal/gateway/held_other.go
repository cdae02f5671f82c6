//go:build !linux

package gateway

// hangupWatch is Linux's (held_linux.go): elsewhere a goroutine per held
// stream reads its connection to notice a client that went away
// (heldStream.watch).
type hangupWatch struct{}

func (g *Gateway) watchHangup(*heldStream) bool { return false }

func (hw *hangupWatch) forget(*heldStream) {}

func (hw *hangupWatch) close() {}
