package fleet

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// IDLen is the length of a session's random id, the part a replica keys
// its sessions by.
const IDLen = 16

// Session is what a sealed session id carries: enough for any replica to
// take the session over (DESIGN decision 4: a downstream session is a
// small record). The gateway gives the fields their meaning.
type Session struct {
	// ID is the session's random id; replicas key their local copy by it,
	// and operators see a prefix of it (S13), never the token.
	ID [IDLen]byte
	// Owner is OwnerHash of the creator's owner fingerprint (S4.1).
	Owner [OwnerHashLen]byte
	// Revision is the negotiated protocol revision.
	Revision string
	// Caps are the client's capabilities, as bits the gateway defines.
	Caps uint8
	// Route is the base path the session was created on, Servers the
	// x-mcp-servers header it carried ("" for none).
	Route, Servers string
	// Issued is when the session was created, to the second.
	Issued time.Time
}

// OwnerHashLen is the length of an owner hash in a session id.
const OwnerHashLen = 16

// OwnerHash is the owner fingerprint as a session id carries it: a
// truncated SHA-256, enough to tell owners apart and short enough for a
// header the client sends with every request.
func OwnerHash(owner string) [OwnerHashLen]byte {
	sum := sha256.Sum256([]byte(owner))
	return [OwnerHashLen]byte(sum[:OwnerHashLen])
}

// maxField bounds each string field of a token; a route path is the
// longest in practice.
const maxField = 512

// SealSession seals s as a session id: URL-safe base64, visible ASCII
// (Mcp-Session-Id allows 0x21-0x7E). ErrTooLong: a string field is over
// 512 bytes.
func (r *Ring) SealSession(s Session) (string, error) {
	if len(s.Revision) > maxField || len(s.Route) > maxField || len(s.Servers) > maxField {
		return "", ErrTooLong
	}
	b := make([]byte, 0, IDLen+OwnerHashLen+binary.MaxVarintLen64+1+3*2+len(s.Revision)+len(s.Route)+len(s.Servers))
	b = append(b, s.ID[:]...)
	b = append(b, s.Owner[:]...)
	b = binary.AppendUvarint(b, uint64(max(s.Issued.Unix(), 0)))
	b = append(b, s.Caps)
	b = appendString(b, s.Revision)
	b = appendString(b, s.Route)
	b = appendString(b, s.Servers)
	return r.session.seal(b, ""), nil
}

// OpenSession verifies a session id sealed by a key of the ring and
// returns its fields.
func (r *Ring) OpenSession(token string) (Session, error) {
	pt, err := r.session.open(token, "")
	if err != nil {
		return Session{}, err
	}
	var s Session
	d := decoder{b: pt}
	copy(s.ID[:], d.bytes(IDLen))
	copy(s.Owner[:], d.bytes(OwnerHashLen))
	issued := d.uvarint()
	s.Caps = d.byte()
	s.Revision = d.string()
	s.Route = d.string()
	s.Servers = d.string()
	if !d.done() || issued > 1<<40 {
		// Verified, so sealed by a ring holder: a newer layout under the
		// same version would be a bug, not an attack; refused all the same.
		return Session{}, ErrMalformed
	}
	s.Issued = time.Unix(int64(issued), 0)
	return s, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads the fields of a verified token; a short or malformed one
// leaves it failed, and done reports false.
type decoder struct {
	b      []byte
	failed bool
}

func (d *decoder) bytes(n int) []byte {
	if d.failed || len(d.b) < n {
		d.failed = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() uint8 {
	if v := d.bytes(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) uvarint() uint64 {
	if d.failed {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.failed = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string {
	n := d.uvarint()
	if n > maxField {
		d.failed = true
		return ""
	}
	return string(d.bytes(int(n)))
}

// done reports whether every field was read and nothing is left over.
func (d *decoder) done() bool { return !d.failed && len(d.b) == 0 }
