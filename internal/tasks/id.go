package tasks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
)

// Task ids. An id is "mcpt1." and the base64url (unpadded) of 32 bytes: a
// 128-bit random nonce, the key the table holds the task by, and the
// first 128 bits of an HMAC-SHA256 of the nonce and the task's owner
// under the table's key. Nobody can guess a nonce, and nobody without the
// key can make the MAC of a nonce for an owner: an id names one task of
// one owner, and is worth nothing to anyone else, even once leaked.

// IDPrefix marks a task id the gateway minted.
const IDPrefix = "mcpt1."

const (
	nonceLen = 16
	macLen   = 16
	// idLen is the length of an id: the prefix and 32 bytes in base64url.
	idLen = len(IDPrefix) + (nonceLen+macLen)*4/3 + 1
)

// ErrMalformedID is what ParseID says of anything that is not an id of
// this form; it names no part of the input.
var ErrMalformedID = errors.New("malformed task id")

// ParseID splits an id into its nonce and MAC without checking the MAC
// (Table.open does, for an owner).
func ParseID(id string) (nonce [nonceLen]byte, mac [macLen]byte, err error) {
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok || len(id) != idLen {
		return nonce, mac, ErrMalformedID
	}
	var b [nonceLen + macLen]byte
	n, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(rest))
	if err != nil || n != len(b) {
		return nonce, mac, ErrMalformedID
	}
	copy(nonce[:], b[:nonceLen])
	copy(mac[:], b[nonceLen:])
	return nonce, mac, nil
}

// formatID is the id of nonce with mac.
func formatID(nonce [nonceLen]byte, mac [macLen]byte) string {
	var b [nonceLen + macLen]byte
	copy(b[:], nonce[:])
	copy(b[nonceLen:], mac[:])
	return IDPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// idMAC is the MAC binding nonce to owner under key. The owner's fields
// are length-prefixed by separators no field contains (they are hashes,
// route ids and hex session hashes), and the domain string keeps this
// MAC from ever meaning anything else made under the same key.
func idMAC(key []byte, nonce [nonceLen]byte, o Owner) [macLen]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("mcpgate task id\x00"))
	m.Write(nonce[:])
	m.Write([]byte("\x00" + o.Caller + "\x00" + o.Route + "\x00" + o.Session))
	var out [macLen]byte
	copy(out[:], m.Sum(nil))
	return out
}
