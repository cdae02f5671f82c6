package vault

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
)

// recordVersion is the at-rest format of this file. A record of another
// version is refused, not guessed at.
const recordVersion = 1

// HKDF info strings: one key per purpose, derived once from each
// configured key.
const (
	infoEncrypt = "mcpgate vault v1 encrypt"
	infoName    = "mcpgate vault v1 name"
)

// aadPrefix starts the additional data of every record; the record's
// object name follows it.
const aadPrefix = "mcpgate vault v1\x00"

// maxSealed bounds a record's ciphertext (and so an entry's plaintext):
// tokens are a few KiB at most.
const maxSealed = 64 << 10

// key is one configured vault key, with its per-purpose keys.
type key struct {
	id      string
	aead    cipher.AEAD // AES-256-GCM under HKDF(secret, infoEncrypt)
	nameKey []byte      // HMAC-SHA256 key, HKDF(secret, infoName)
}

func newKey(k config.VaultKey) (*key, error) {
	if !validKeyID(k.ID) {
		return nil, fmt.Errorf("vault key id %q: must be 1 to 32 of [A-Za-z0-9_-]", k.ID)
	}
	secret, err := k.Bytes()
	if err != nil {
		return nil, fmt.Errorf("vault key %s: %w", k.ID, err)
	}
	enc, err := hkdf.Key(sha256.New, secret, nil, infoEncrypt, 32)
	if err != nil {
		return nil, err
	}
	name, err := hkdf.Key(sha256.New, secret, nil, infoName, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(enc)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &key{id: k.ID, aead: aead, nameKey: name}, nil
}

// name is the object name of (person, server)'s entry under this key:
// hex HMAC-SHA256 over both, each length-prefixed so that no two pairs
// collide. Keyed, so that a copy of the database cannot confirm a guessed
// person id; it changes with the key, so Rotate renames as it re-seals.
func (k *key) name(person, server string) string {
	m := hmac.New(sha256.New, k.nameKey)
	m.Write(lengthPrefixed(person, server))
	return hex.EncodeToString(m.Sum(nil))
}

func lengthPrefixed(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

func validKeyID(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// record is an entry as stored: the document of a kind vault object.
type record struct {
	V          int    `json:"v"`
	KID        string `json:"kid"`
	Nonce      []byte `json:"nonce"`      // 12 bytes, random
	Ciphertext []byte `json:"ciphertext"` // AES-256-GCM(plaintext), tag included
}

// plaintext is what a record's ciphertext holds: the whole entry.
// Person and server are inside too, so that List can say whose it is.
type plaintext struct {
	Issuer       string    `json:"issuer,omitempty"`
	Person       string    `json:"person"`
	Server       string    `json:"server"`
	Kind         string    `json:"kind"`
	AccessToken  string    `json:"access_token,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Scopes       []string  `json:"scopes,omitempty"`
	Header       string    `json:"header,omitempty"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
	LastUsed     time.Time `json:"last_used,omitzero"`
	// Registration is a client registration's document (registration.go);
	// only in entries of kind registration.
	Registration json.RawMessage `json:"registration,omitempty"`
}

// Errors of a record that cannot be read.
var (
	// ErrUnknownKey: the record was sealed with a key id vault.keys does
	// not list (removed before mcpgate vault rotate re-sealed it).
	ErrUnknownKey = errors.New("sealed with a key vault.keys does not list")
	// ErrDecrypt: the key of the record's id does not open it: a
	// different key under the same id, or a record altered or moved onto
	// another entry's name.
	ErrDecrypt = errors.New("cannot be decrypted (the key of its id is not the one it was sealed with, or the record was altered or moved)")
	// ErrCorrupt: the document is not a vault record.
	ErrCorrupt = errors.New("not a valid vault record")
)

// decodeRecord parses a stored document, strictly.
func decodeRecord(doc []byte) (record, error) {
	var r record
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return record{}, fmt.Errorf("%w: %v", ErrCorrupt, errorKind(err))
	}
	if dec.More() {
		return record{}, fmt.Errorf("%w: data after the document", ErrCorrupt)
	}
	switch {
	case r.V != recordVersion:
		return record{}, fmt.Errorf("%w: version %d (this mcpgate reads %d)", ErrCorrupt, r.V, recordVersion)
	case !validKeyID(r.KID):
		return record{}, fmt.Errorf("%w: bad key id", ErrCorrupt)
	case len(r.Nonce) != 12:
		return record{}, fmt.Errorf("%w: nonce of %d bytes", ErrCorrupt, len(r.Nonce))
	case len(r.Ciphertext) < 16 || len(r.Ciphertext) > maxSealed+16:
		return record{}, fmt.Errorf("%w: ciphertext of %d bytes", ErrCorrupt, len(r.Ciphertext))
	}
	return r, nil
}

// errorKind describes a JSON error without quoting the document.
func errorKind(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at offset %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %s has the wrong type", te.Field)
	}
	return "invalid document"
}

// ring is the configured keys; keys[0] seals.
type ring struct {
	keys []*key
	byID map[string]*key
}

func newRing(keys []config.VaultKey) (*ring, error) {
	if len(keys) == 0 {
		return nil, errors.New("vault: no keys (vault.keys must list at least one)")
	}
	r := &ring{byID: map[string]*key{}}
	for _, ck := range keys {
		k, err := newKey(ck)
		if err != nil {
			return nil, fmt.Errorf("vault: %w", err)
		}
		if r.byID[k.id] != nil {
			return nil, fmt.Errorf("vault: key id %q listed twice", k.id)
		}
		r.keys = append(r.keys, k)
		r.byID[k.id] = k
	}
	return r, nil
}

func (r *ring) primary() *key { return r.keys[0] }

func aad(name string) []byte { return []byte(aadPrefix + name) }

// seal encrypts p under the primary key and returns its object name and
// document.
func (r *ring) seal(p plaintext) (name string, doc []byte, err error) {
	k := r.primary()
	name = k.name(p.Person, p.Server)
	pt, err := json.Marshal(p)
	if err != nil {
		return "", nil, err
	}
	defer clear(pt)
	if len(pt) > maxSealed {
		return "", nil, fmt.Errorf("entry of %d bytes is larger than %d: %w", len(pt), maxSealed, ErrInvalid)
	}
	nonce := make([]byte, k.aead.NonceSize())
	rand.Read(nonce)
	doc, err = json.Marshal(record{V: recordVersion, KID: k.id, Nonce: nonce, Ciphertext: k.aead.Seal(nil, nonce, pt, aad(name))})
	return name, doc, err
}

// open decrypts the document stored under name and checks it belongs
// there. It returns the id of the key that sealed it.
func (r *ring) open(name string, doc []byte) (plaintext, string, error) {
	rec, err := decodeRecord(doc)
	if err != nil {
		return plaintext{}, "", err
	}
	k := r.byID[rec.KID]
	if k == nil {
		return plaintext{}, rec.KID, fmt.Errorf("%w: key id %q (restore it to vault.keys, or delete the entry)", ErrUnknownKey, rec.KID)
	}
	pt, err := k.aead.Open(nil, rec.Nonce, rec.Ciphertext, aad(name))
	if err != nil {
		return plaintext{}, rec.KID, fmt.Errorf("%w: key id %q", ErrDecrypt, rec.KID)
	}
	defer clear(pt)
	var p plaintext
	if err := json.Unmarshal(pt, &p); err != nil {
		return plaintext{}, rec.KID, fmt.Errorf("%w: the decrypted entry is not JSON", ErrCorrupt)
	}
	// The additional data already binds the ciphertext to name; this
	// checks the entry's own (person, server) name it too.
	if p.Person == "" || p.Server == "" || !hmac.Equal([]byte(k.name(p.Person, p.Server)), []byte(name)) {
		return plaintext{}, rec.KID, fmt.Errorf("%w: the entry does not belong under its name", ErrCorrupt)
	}
	return p, rec.KID, nil
}
