package fleet

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Peer authentication: a replica that hands a client's message to another
// replica (the reply to a server-initiated request, a 2026-07-28 retry)
// proves the hop is the fleet's with an HMAC-SHA256 under a key derived
// from the session keys for PurposePeerAuth. The MAC covers the request's
// method, target (path and query), the address of the client it carries
// (which the receiver then takes as the request's remote address), the
// party that sent a delivered reply (From: the receiver hands the reply
// only to a request that was sent to that party), a timestamp and the
// SHA-256 of its body, so a value is good for one request within
// PeerWindow of its signing: replaying it inside that window repeats the
// same request with the same body from the same party, which is as much
// as a recorded hop allows. It proves only that the hop comes from a
// holder of the keys: who the client of a forwarded request is, the
// receiving replica decides as for any request; who sent a delivered
// reply, the forwarding replica decided, and the MAC carries its word.
//
//	SignPeer(req, now)          -> "v1;t=<unix>;k=<key id>;m=<mac>"
//	VerifyPeer(value, req, now) -> nil, or why not

// PeerWindow is how far a peer request's timestamp may be from the
// verifier's clock either way: replicas' clocks differ by seconds, and a
// hop takes milliseconds.
const PeerWindow = 60 * time.Second

// ErrStale: a peer request signed too long ago, or in the future (a
// replay, or a clock far off).
var ErrStale = errors.New("fleet: peer request outside the time window")

// peerKey is one session key's HMAC key and its id.
type peerKey struct {
	id  [keyIDLen]byte
	key []byte
}

func derivePeerKey(root []byte) (peerKey, error) {
	dk, err := hkdf.Key(sha256.New, root, []byte("mcpgate fleet session keys"), "mcpgate/fleet/v1 "+PurposePeerAuth, 32)
	if err != nil {
		return peerKey{}, err
	}
	sum := sha256.Sum256(dk)
	return peerKey{id: [keyIDLen]byte(sum[:keyIDLen]), key: dk}, nil
}

// PeerAuth is a parsed peer authentication value.
type PeerAuth struct {
	Time  int64 // Unix seconds
	KeyID [keyIDLen]byte
	MAC   [sha256.Size]byte
}

// maxPeerAuth bounds what ParsePeerAuth looks at: the value is a header a
// client could send too.
const maxPeerAuth = 128

// ParsePeerAuth parses a peer authentication value of the form
// "v1;t=<unix seconds>;k=<8 hex digits>;m=<43 base64url characters>";
// anything else is ErrMalformed.
func ParsePeerAuth(v string) (PeerAuth, error) {
	var pa PeerAuth
	if len(v) > maxPeerAuth {
		return pa, ErrMalformed
	}
	rest, ok := strings.CutPrefix(v, "v1;t=")
	if !ok {
		return pa, ErrMalformed
	}
	ts, rest, ok := strings.Cut(rest, ";k=")
	if !ok || ts == "" || len(ts) > 12 || strings.TrimLeft(ts, "0123456789") != "" || (len(ts) > 1 && ts[0] == '0') {
		return pa, ErrMalformed
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return pa, ErrMalformed
	}
	kid, mac, ok := strings.Cut(rest, ";m=")
	if !ok || len(kid) != 2*keyIDLen || len(mac) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return pa, ErrMalformed
	}
	if strings.ToLower(kid) != kid {
		// One spelling per value: hex.Decode takes upper case too.
		return pa, ErrMalformed
	}
	if _, err := hex.Decode(pa.KeyID[:], []byte(kid)); err != nil {
		return pa, ErrMalformed
	}
	m, err := base64.RawURLEncoding.Strict().DecodeString(mac)
	if err != nil || len(m) != sha256.Size {
		return pa, ErrMalformed
	}
	pa.Time = t
	pa.MAC = [sha256.Size]byte(m)
	return pa, nil
}

// String is the value ParsePeerAuth parses.
func (pa PeerAuth) String() string {
	return "v1;t=" + strconv.FormatInt(pa.Time, 10) + ";k=" + hex.EncodeToString(pa.KeyID[:]) + ";m=" + base64.RawURLEncoding.EncodeToString(pa.MAC[:])
}

// PeerRequest is what a peer MAC covers of a request.
type PeerRequest struct {
	Method string
	// Target is the path and query as the receiver sees them.
	Target string
	// Client is the address of the client whose message the request
	// carries ("" for none).
	Client string
	// From is who sent the reply a delivery carries, as the forwarding
	// replica authenticated them; zero for a forwarded client request.
	From PeerParty
	Body []byte
}

// PeerParty is who sent a message, as a replica authenticated them. The
// gateway gives the fields their meaning (an owner fingerprint, a
// session's hash, a route's); the MAC covers each of them.
type PeerParty struct {
	Owner, Session, Route string
}

// SignPeer is the peer authentication value of req at now, under the
// newest key.
func (r *Ring) SignPeer(req PeerRequest, now time.Time) string {
	k := &r.peer[0]
	pa := PeerAuth{Time: now.Unix(), KeyID: k.id}
	pa.MAC = peerMAC(k.key, req, pa.Time)
	return pa.String()
}

// VerifyPeer checks a peer authentication value against the request it
// came with: ErrMalformed, ErrUnknownKey (another fleet's, or a key
// removed by rotation), ErrStale (outside PeerWindow of now) or ErrForged
// (the MAC does not match req).
func (r *Ring) VerifyPeer(value string, req PeerRequest, now time.Time) error {
	pa, err := ParsePeerAuth(value)
	if err != nil {
		return err
	}
	var k *peerKey
	for i := range r.peer {
		if r.peer[i].id == pa.KeyID {
			k = &r.peer[i]
			break
		}
	}
	if k == nil {
		return ErrUnknownKey
	}
	if d := now.Sub(time.Unix(pa.Time, 0)); d > PeerWindow || d < -PeerWindow {
		return ErrStale
	}
	want := peerMAC(k.key, req, pa.Time)
	if !hmac.Equal(want[:], pa.MAC[:]) {
		return ErrForged
	}
	return nil
}

// peerMAC is the HMAC of a request's parts, each length-prefixed so that
// no two different requests give the same input.
func peerMAC(key []byte, req PeerRequest, t int64) [sha256.Size]byte {
	bodySum := sha256.Sum256(req.Body)
	f := req.From
	msg := make([]byte, 0, 6*binary.MaxVarintLen64+len(req.Method)+len(req.Target)+len(req.Client)+len(f.Owner)+len(f.Session)+len(f.Route)+8+len(bodySum))
	msg = appendString(msg, req.Method)
	msg = appendString(msg, req.Target)
	msg = appendString(msg, req.Client)
	msg = appendString(msg, f.Owner)
	msg = appendString(msg, f.Session)
	msg = appendString(msg, f.Route)
	msg = binary.BigEndian.AppendUint64(msg, uint64(t))
	msg = append(msg, bodySum[:]...)
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return [sha256.Size]byte(h.Sum(nil))
}
