package tasks

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Sealed records. What the store keeps of a task's call (its result, its
// JSON-RPC error, its pending input requests) is sealed with AES-256-GCM
// under the Shared table's SealKeys (fleet.TaskResultKeys: HKDF of
// fleet.session_keys, a purpose of their own): whoever reads the database
// reads statuses and times, never what a tool returned. The first key
// seals, every key opens (rotation), picked by the key id in the value.
//
// A sealed value is a JSON string, so the store's columns and checks stay
// as they are:
//
//	"mcpts1.<base64url(key id (4) | nonce (12) | ciphertext and tag)>"
//
// The additional data binds the value to its row and column: a domain
// string, the field ("result", "error", "input", "answer:" and the
// request's key for an answer to an input request) and the row id, so a
// value copied to another task's row, or from one column to another, does
// not open. A value that does not open is errSealed, which the table
// reports as ErrStore (the store cannot say), never as a result.
//
// Rows written before results were sealed hold clear JSON objects; they
// still read (the upgrade path) until their TTL sweeps them.

// sealPrefix marks a sealed value inside its JSON string.
const sealPrefix = "mcpts1."

const (
	sealKeyIDLen = 4
	sealNonceLen = 12
	sealHeadLen  = sealKeyIDLen + sealNonceLen
	sealTagLen   = 16
)

// Fields of a record that are sealed, each bound in its additional data.
const (
	fieldResult = "result"
	fieldError  = "error"
	fieldInput  = "input"
)

// errSealed says a stored value does not open: tampered, moved from
// another row or column, or sealed under a key this table does not hold.
// It names no part of the value.
var errSealed = errors.New("a stored task value does not open")

// sealer seals and opens a table's stored values. Immutable once built.
type sealer struct {
	keys []sealKey // the first seals
}

type sealKey struct {
	id   [sealKeyIDLen]byte
	aead cipher.AEAD
}

// newSealer returns the sealer of keys (32 bytes each; the first seals).
func newSealer(keys [][]byte) (*sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("tasks: no result sealing keys")
	}
	s := &sealer{}
	for i, k := range keys {
		if len(k) != 32 {
			return nil, fmt.Errorf("tasks: result sealing key %d: must be 32 bytes (got %d)", i, len(k))
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		var sk sealKey
		// The id is a hash of the key, which says nothing of it.
		sum := sha256.Sum256(append([]byte("mcpgate task seal key id\x00"), k...))
		copy(sk.id[:], sum[:])
		sk.aead = aead
		s.keys = append(s.keys, sk)
	}
	return s, nil
}

// sealKeysOf derives sealing keys from a table's id keys, for a Shared
// table given none (tests, and uses of the package outside the gateway,
// which hands it fleet.TaskResultKeys): still a key of its own purpose,
// the same wherever the id keys are.
func sealKeysOf(idKeys [][]byte) [][]byte {
	out := make([][]byte, 0, len(idKeys))
	for _, k := range idKeys {
		dk, err := hkdf.Key(sha256.New, k, []byte("mcpgate task id key"), "mcpgate/tasks/v1 task-result", 32)
		if err != nil {
			panic("tasks: hkdf: " + err.Error()) // only for a length no caller asks
		}
		out = append(out, dk)
	}
	return out
}

// additional is the additional data of a sealed value of field in row.
func additional(row, field string) []byte {
	return []byte("mcpgate task record\x00" + field + "\x00" + row)
}

// seal is doc sealed for field of row, as a JSON string; nil for nil.
func (s *sealer) seal(row, field string, doc []byte) []byte {
	if doc == nil {
		return nil
	}
	k := &s.keys[0]
	buf := make([]byte, sealHeadLen, sealHeadLen+len(doc)+sealTagLen)
	copy(buf, k.id[:])
	_, _ = rand.Read(buf[sealKeyIDLen:sealHeadLen]) // never fails (crypto/rand)
	buf = k.aead.Seal(buf, buf[sealKeyIDLen:sealHeadLen], doc, additional(row, field))
	out := make([]byte, 0, 2+len(sealPrefix)+base64.RawURLEncoding.EncodedLen(len(buf)))
	out = append(out, '"')
	out = append(out, sealPrefix...)
	out = base64.RawURLEncoding.AppendEncode(out, buf)
	return append(out, '"')
}

// open is the document a stored value of field in row holds: nil for an
// empty value, the value itself for a clear JSON object in a result or
// error (a row from before sealing, whose results and errors were objects), the opened document for a sealed one, and
// errSealed for anything else.
func (s *sealer) open(row, field string, stored []byte) ([]byte, error) {
	v := bytes.TrimLeft(stored, " \t\r\n")
	if len(v) == 0 {
		return nil, nil
	}
	if v[0] == '{' && (field == fieldResult || field == fieldError) {
		// Clear, from before sealing: the store checked it was JSON when
		// it was written; check again, it is about to be served. Inputs
		// and answers were never written in clear.
		if !json.Valid(v) {
			return nil, errSealed
		}
		return stored, nil
	}
	// A seal has one spelling: what seal wrote, nothing around it, and no
	// line breaks in its base64 (which the decoder, even Strict, skips).
	// Another spelling of a genuine seal opens to the same document, but
	// anything keyed by the stored text must not see two texts for one
	// seal (FuzzOpenSealed).
	inner, ok := bytes.CutPrefix(stored, []byte(`"`+sealPrefix))
	if !ok || len(inner) == 0 || inner[len(inner)-1] != '"' || bytes.ContainsAny(inner, "\r\n") {
		return nil, errSealed
	}
	inner = inner[:len(inner)-1]
	buf := make([]byte, base64.RawURLEncoding.DecodedLen(len(inner)))
	n, err := base64.RawURLEncoding.Strict().Decode(buf, inner)
	if err != nil || n < sealHeadLen+sealTagLen {
		return nil, errSealed
	}
	buf = buf[:n]
	for i := range s.keys {
		k := &s.keys[i]
		if [sealKeyIDLen]byte(buf[:sealKeyIDLen]) != k.id {
			continue
		}
		ct := buf[sealHeadLen:]
		doc, err := k.aead.Open(ct[:0], buf[sealKeyIDLen:sealHeadLen], ct, additional(row, field))
		if err != nil {
			return nil, errSealed
		}
		return doc, nil
	}
	return nil, errSealed
}
