package config

import (
	"encoding/base64"
	"fmt"
	"strings"
)

// The per-person upstream credential vault (SPEC S19): the keys its
// entries are encrypted under. internal/vault owns the entries; this file
// only says which keys there are and that each is well formed.

// VaultKeyLen is the length of a vault key, decoded: AES-256.
const VaultKeyLen = 32

// Vault configures the credential vault.
type Vault struct {
	// Keys: the first encrypts, every one decrypts.
	Keys []VaultKey `config:"keys,nonempty=key" doc:"The keys vault entries are encrypted under, newest first: the first encrypts new and re-encrypted entries, every one decrypts. To rotate, put a new key first, run mcpgate vault rotate, then remove the old one."`
}

// VaultKey is one vault key.
type VaultKey struct {
	ID   string `config:"id,required,expand,trim" doc:"The key's id, recorded with every entry it encrypts: [A-Za-z0-9_-], 1 to 32 characters, unique."`
	Key  string `config:"key,required,expand,trim,secret" doc:"32 random bytes in base64 (standard or URL alphabet, padded or not), usually from the environment: ${MCPGATE_VAULT_KEY_1}. Make one with openssl rand -base64 32."`
	Line int    `config:",line"`
}

// Bytes decodes the key. The error never quotes the value.
func (k VaultKey) Bytes() ([]byte, error) { return DecodeVaultKey(k.Key) }

// DecodeVaultKey decodes a vault key given in base64 (standard or URL
// alphabet, padded or not) and checks it is VaultKeyLen bytes. The error
// never quotes s.
func DecodeVaultKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, err := enc.Strict().DecodeString(s)
		if err != nil {
			continue
		}
		if len(b) != VaultKeyLen {
			return nil, fmt.Errorf("must be %d bytes, base64-encoded (got %d bytes; make one with openssl rand -base64 32)", VaultKeyLen, len(b))
		}
		return b, nil
	}
	return nil, fmt.Errorf("must be %d bytes, base64-encoded (not valid base64; make one with openssl rand -base64 32)", VaultKeyLen)
}

// validVaultKeyID reports whether s matches [A-Za-z0-9_-]{1,32}.
func validVaultKeyID(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

func (v *Vault) validate(errs *errorList, strict bool) {
	p := "vault"
	checkFields(errs, p, v, strict)
	seen := map[string]int{}
	for i := range v.Keys {
		k, kp := &v.Keys[i], indexPath(p+".keys", i)
		checkFields(errs, kp, k, strict)
		if k.ID != "" {
			if !validVaultKeyID(k.ID) {
				errs.add(kp+".id", k.Line, "must be 1 to 32 of [A-Za-z0-9_-] (got %q)", truncate(k.ID, 40))
			} else if j, dup := seen[k.ID]; dup {
				errs.add(kp+".id", k.Line, "same id as keys[%d]", j)
			} else {
				seen[k.ID] = i
			}
		}
		if strings.TrimSpace(k.Key) != "" {
			if _, err := k.Bytes(); err != nil {
				errs.add(kp+".key", k.Line, "%s", err.Error())
			}
		}
	}
}
