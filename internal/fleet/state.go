package fleet

import (
	"encoding/binary"
	"errors"
)

// State is what a sealed 2026-07-28 requestState carries: the round of a
// call in progress across input_required results (SPEC S18.1).
type State struct {
	// Exchange names the call on the replica running it; Round is the
	// round the state was minted for (only the latest resumes the call).
	Exchange string
	Round    int64
	// Origin is the advertised URL of the replica running the call
	// (fleet.advertise; "" when not configured), where a retry that
	// reaches another replica belongs.
	Origin string
}

// SealState seals st as a requestState bound to owner: it opens only for
// the same owner fingerprint. ErrTooLong: a string field is over 512
// bytes.
func (r *Ring) SealState(st State, owner string) (string, error) {
	if len(st.Exchange) > maxField || len(st.Origin) > maxField {
		return "", ErrTooLong
	}
	if st.Round < 1 {
		return "", errors.New("fleet: a requestState round starts at 1")
	}
	b := make([]byte, 0, 2*2+len(st.Exchange)+len(st.Origin)+binary.MaxVarintLen64)
	b = appendString(b, st.Exchange)
	b = binary.AppendUvarint(b, uint64(st.Round))
	b = appendString(b, st.Origin)
	return r.state.seal(b, owner), nil
}

// OpenState verifies a requestState sealed by a key of the ring for
// owner and returns its fields. Another owner's state is ErrForged.
func (r *Ring) OpenState(token, owner string) (State, error) {
	pt, err := r.state.open(token, owner)
	if err != nil {
		return State{}, err
	}
	d := decoder{b: pt}
	var st State
	st.Exchange = d.string()
	round := d.uvarint()
	st.Origin = d.string()
	if !d.done() || round < 1 || round > 1<<62 {
		return State{}, ErrMalformed
	}
	st.Round = int64(round)
	return st, nil
}
