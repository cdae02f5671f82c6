// Package relay owns what the replicas of a fleet tell and hand each
// other (SPEC S15): the replica registry and the signed hops between
// replicas (Peers), the notes about sessions and list changes on the bus
// (Bus), the fan-out of terminated sessions (Bus), and the buffers of
// resumable POST streams with their replay (Resumables). Each is a small
// type that owns its lock. The loops that outlive a request are started
// from the owner's context and waited for by the type's Close: the
// registry heartbeat (Peers.Start, Peers.Close) and the two bus followers
// (Bus.Start, Bus.Close). Work tied to one stream (Resumables.Outlive,
// Bus.KeepStream, Resume.Replay) blocks in a goroutine its caller owns
// and waits for; Resumables.Stop and the bus's context make it return.
//
// It must not import internal/gateway, and it holds no downstream
// session: what a note means for a local session (end it, deliver a
// message to its stream, reload its state) is the gateway's, handed in
// as the small interfaces and funcs defined here. It decides what is
// published, when, to whom, under which ids and MACs, and how buffered
// events are replayed; it never decides what a message says.
package relay

import "time"

// Timeout bounds one publish, subscribe or read of the shared state.
const Timeout = 2 * time.Second
