// Package fleet owns what the replicas of one fleet share so that any of
// them can serve any client (SPEC S15). Today that is the key ring of
// fleet.session_keys and the tokens sealed under it: stateful session ids
// and 2026-07-28 requestState values, which carry what another replica
// (or this one after a restart) needs to take the session or the round
// over; and the HMAC one replica signs what it hands another with
// (peer.go). It holds no session state, does no I/O and does not log; it
// knows neither HTTP nor MCP: the gateway decides what goes in a token and
// what an opened one means (owner, expiry, terminations), and which parts
// of a request a peer MAC covers.
//
//	fleet.session_keys -> NewRing: one AES-256-GCM key per (key, purpose),
//	                      derived with HKDF-SHA256 once, each with a key id
//	SealSession(fields) -> base64url(version | key id | nonce | GCM(fields))
//	OpenSession(token)  -> fields, or ErrMalformed/ErrUnknownKey/ErrForged
//
// The first key seals, every key opens (rotation); the key id in a token
// picks its key, so opening never tries them all. The purpose is bound
// twice: its own derived key, and the additional data of the seal, so a
// requestState never opens as a session id or the other way round.
package fleet

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// KeyLen is the length of a session key: 32 bytes.
const KeyLen = 32

// Purposes a ring derives a key for. Each is also the additional data of
// what it seals.
const (
	PurposeSessionID    = "session-id"
	PurposeRequestState = "request-state"
	// PurposePeerAuth keys the HMAC one replica signs its requests to
	// another with (peer.go); it seals nothing.
	PurposePeerAuth = "peer-auth"
	// PurposeTaskID keys the HMAC that binds a task id to its owner
	// (internal/tasks); it seals nothing.
	PurposeTaskID = "task-id"
	// PurposeTaskResult keys the AEAD that seals what the task store
	// keeps of a task's call (internal/tasks): its result, its error and
	// its pending input requests.
	PurposeTaskResult = "task-result"
)

// version is the first byte of every token: the layout below. A new
// layout takes a new version; the opener refuses the ones it does not know.
const version = 1

// Token layout, before base64url: version, key id, GCM nonce, then the
// sealed fields and their tag.
const (
	keyIDLen  = 4
	nonceLen  = 12
	headerLen = 1 + keyIDLen + nonceLen
	tagLen    = 16
	// maxToken bounds what the opener decodes at all (base64 characters):
	// a header value is client-chosen.
	maxToken = 2048
)

// Why a token does not open. The gateway treats all three alike (an
// unknown id); they are distinct for tests and for the debug log.
var (
	// ErrMalformed: not a token of a version this ring knows.
	ErrMalformed = errors.New("fleet: not a sealed token")
	// ErrUnknownKey: sealed under a key this ring does not hold (removed
	// by rotation, another fleet's, or a forged id).
	ErrUnknownKey = errors.New("fleet: sealed under an unknown key")
	// ErrForged: the key is known but the seal does not verify: tampered,
	// another purpose's, or bound to another owner.
	ErrForged = errors.New("fleet: seal does not verify")
	// ErrTooLong: the fields do not fit in a token.
	ErrTooLong = errors.New("fleet: fields too long to seal")
)

// Ring holds the derived keys of every purpose. It is immutable once
// built and safe for concurrent use.
type Ring struct {
	session, state keySet
	peer           []peerKey // newest (the signing one) first
}

// keySet is one purpose's keys, newest (the sealing one) first.
type keySet struct {
	aad  string // the purpose, bound as additional data
	keys []ringKey
}

type ringKey struct {
	id   [keyIDLen]byte
	aead cipher.AEAD
}

// NewRing derives the keys of every purpose from the session keys, newest
// first: keys[0] seals, every one opens. Each key must be KeyLen bytes;
// the error never quotes one.
func NewRing(keys [][]byte) (*Ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("fleet: no session keys")
	}
	r := &Ring{session: keySet{aad: "mcpgate/fleet/v1 " + PurposeSessionID}, state: keySet{aad: "mcpgate/fleet/v1 " + PurposeRequestState}}
	for i, k := range keys {
		if len(k) != KeyLen {
			return nil, fmt.Errorf("fleet: session key %d: must be %d bytes (got %d)", i, KeyLen, len(k))
		}
		for _, ks := range []*keySet{&r.session, &r.state} {
			rk, err := deriveKey(k, ks.aad)
			if err != nil {
				return nil, fmt.Errorf("fleet: session key %d: %w", i, err)
			}
			for j, o := range ks.keys {
				if o.id == rk.id {
					// The same key twice, or (2^-32) two keys whose ids
					// collide: opening could pick the wrong one.
					return nil, fmt.Errorf("fleet: session keys %d and %d have the same key id", j, i)
				}
			}
			ks.keys = append(ks.keys, rk)
		}
		pk, err := derivePeerKey(k)
		if err != nil {
			return nil, fmt.Errorf("fleet: session key %d: %w", i, err)
		}
		r.peer = append(r.peer, pk)
	}
	return r, nil
}

// deriveKey is the purpose's AES-256 key from one session key, and its id:
// the first bytes of the derived key's SHA-256, which says nothing of the
// key and differs between purposes.
func deriveKey(root []byte, info string) (ringKey, error) {
	dk, err := hkdf.Key(sha256.New, root, []byte("mcpgate fleet session keys"), info, 32)
	if err != nil {
		return ringKey{}, err
	}
	block, err := aes.NewCipher(dk)
	if err != nil {
		return ringKey{}, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return ringKey{}, err
	}
	var rk ringKey
	sum := sha256.Sum256(dk)
	copy(rk.id[:], sum[:keyIDLen])
	rk.aead = aead
	return rk, nil
}

// seal seals plaintext under the set's first key; bind is more additional
// data (requestState binds its owner).
func (ks *keySet) seal(plaintext []byte, bind string) string {
	k := &ks.keys[0]
	buf := make([]byte, headerLen, headerLen+len(plaintext)+tagLen)
	buf[0] = version
	copy(buf[1:], k.id[:])
	_, _ = rand.Read(buf[1+keyIDLen : headerLen]) // never fails (crypto/rand)
	buf = k.aead.Seal(buf, buf[1+keyIDLen:headerLen], plaintext, ks.additional(buf[:1+keyIDLen], bind))
	return base64.RawURLEncoding.EncodeToString(buf)
}

// open verifies and opens a token of the set; the plaintext is returned
// in a buffer of its own.
func (ks *keySet) open(token, bind string) ([]byte, error) {
	// Line breaks are refused before decoding: the decoder, even Strict,
	// skips them, which would give one token a second spelling.
	if len(token) > maxToken || len(token) < base64.RawURLEncoding.EncodedLen(headerLen+tagLen) || strings.ContainsAny(token, "\r\n") {
		return nil, ErrMalformed
	}
	buf, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(buf) < headerLen+tagLen || buf[0] != version {
		return nil, ErrMalformed
	}
	var k *ringKey
	for i := range ks.keys {
		if [keyIDLen]byte(buf[1:1+keyIDLen]) == ks.keys[i].id {
			k = &ks.keys[i]
			break
		}
	}
	if k == nil {
		return nil, ErrUnknownKey
	}
	ct := buf[headerLen:]
	pt, err := k.aead.Open(ct[:0], buf[1+keyIDLen:headerLen], ct, ks.additional(buf[:1+keyIDLen], bind))
	if err != nil {
		return nil, ErrForged
	}
	return pt, nil
}

// additional is the additional data of a seal: the purpose, the token's
// version and key id, and what the caller binds.
func (ks *keySet) additional(head []byte, bind string) []byte {
	ad := make([]byte, 0, len(ks.aad)+len(head)+1+len(bind))
	ad = append(ad, ks.aad...)
	ad = append(ad, head...)
	ad = append(ad, 0)
	return append(ad, bind...)
}

// TaskIDKeys are the keys task ids are sealed under, one per session key
// in the same order (the first mints): every replica of the fleet derives
// the same, so a task made on one is opened on any, and none of them is a
// key of another purpose.
func TaskIDKeys(keys [][]byte) ([][]byte, error) {
	return purposeKeys(keys, PurposeTaskID)
}

// TaskResultKeys are the keys stored task results are sealed under, as
// TaskIDKeys are for ids (the first seals, every one opens): a purpose of
// their own, so no id MAC or token is ever made under them.
func TaskResultKeys(keys [][]byte) ([][]byte, error) {
	return purposeKeys(keys, PurposeTaskResult)
}

// purposeKeys derives one 32-byte key of purpose per session key, in order.
func purposeKeys(keys [][]byte, purpose string) ([][]byte, error) {
	out := make([][]byte, 0, len(keys))
	for i, k := range keys {
		dk, err := hkdf.Key(sha256.New, k, []byte("mcpgate fleet session keys"), "mcpgate/fleet/v1 "+purpose, 32)
		if err != nil {
			return nil, fmt.Errorf("fleet: session key %d: %w", i, err)
		}
		out = append(out, dk)
	}
	return out, nil
}
