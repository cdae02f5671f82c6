package authserver

import (
	"context"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/mcpgate/mcpgate/internal/store"
)

// SealKeyFile is the name, in Options.DataDir, of the file holding the
// 32-byte key the signing keys are sealed under in the store. Keeping it
// out of the database means a copy of the database alone (a backup, a
// replica) cannot mint tokens.
const SealKeyFile = "oauth-seal.key"

// loadSealKey reads the sealing key, creating it (mode 0600) on first
// start; fresh reports that it was just created. A file that others may
// read is refused rather than used: the key would no longer be a secret.
func loadSealKey(dir string) (key []byte, fresh bool, err error) {
	path := filepath.Join(dir, SealKeyFile)
	key, err = readSealKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create data directory: %w", err)
	}
	key = make([]byte, 32)
	rand.Read(key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process sharing the directory won the race: use its key.
		key, err = readSealKey(path)
		return key, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", SealKeyFile, err)
	}
	_, err = f.WriteString(hex.EncodeToString(key) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, false, fmt.Errorf("write %s: %w", SealKeyFile, err)
	}
	return key, true, nil
}

func readSealKey(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: it must not be readable by group or others (chmod 600)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%s does not hold a 32-byte hex key", path)
	}
	return key, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// keyRecord is a signing key as stored (kind oauth_key, named by its kid).
type keyRecord struct {
	Alg     string    `json:"alg"`
	Created time.Time `json:"created"`
	// Sealed is nonce || AES-256-GCM(PKCS#8 private key), with the kid as
	// additional data so that a record cannot be renamed into another.
	Sealed []byte `json:"sealed"`
}

type signingKey struct {
	kid     string
	created time.Time
	priv    *ecdsa.PrivateKey
	signer  jose.Signer
}

// keyring holds the signing keys, newest first. The newest signs; the
// older ones are published until every token they signed has expired.
type keyring struct {
	store    store.Objects
	aead     cipher.AEAD
	now      func() time.Time
	logger   *slog.Logger
	rotation time.Duration // how long a key signs
	retain   time.Duration // how long a key stays published after it stopped signing

	mu   sync.RWMutex
	keys []*signingKey
}

// load reads every stored key. A key that cannot be unsealed is an error
// (the wrong oauth-seal.key), unless the sealing key was just created:
// then the old file is gone for good, and its keys are deleted so that
// new ones can take over.
func (k *keyring) load(ctx context.Context, freshSeal bool) error {
	objs, err := k.store.ListObjects(ctx, store.KindOAuthKey)
	if err != nil {
		return fmt.Errorf("load signing keys: %w", err)
	}
	var keys []*signingKey
	for _, o := range objs {
		sk, err := k.open(o)
		if err != nil {
			if !freshSeal {
				return fmt.Errorf("signing key %s: %w (is %s, or auth.login.seal_key, the key these were sealed with?)", o.Name, err, SealKeyFile)
			}
			k.logger.Warn("oauth signing key sealed with a lost key file; deleting it", attrKid, o.Name)
			if err := k.store.DeleteObject(ctx, store.KindOAuthKey, o.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("delete signing key %s: %w", o.Name, err)
			}
			continue
		}
		keys = append(keys, sk)
	}
	k.set(keys)
	return nil
}

// reload picks up keys other replicas created, then rotates if due.
func (k *keyring) reload(ctx context.Context) error {
	objs, err := k.store.ListObjects(ctx, store.KindOAuthKey)
	if err != nil {
		return fmt.Errorf("load signing keys: %w", err)
	}
	k.mu.RLock()
	known := map[string]*signingKey{}
	for _, sk := range k.keys {
		known[sk.kid] = sk
	}
	k.mu.RUnlock()
	var keys []*signingKey
	for _, o := range objs {
		if sk, ok := known[o.Name]; ok {
			keys = append(keys, sk)
			continue
		}
		sk, err := k.open(o)
		if err != nil {
			k.logger.Error("oauth signing key cannot be unsealed; ignored", attrKid, o.Name, attrErr, err)
			continue
		}
		keys = append(keys, sk)
	}
	k.set(keys)
	return k.rotate(ctx)
}

func (k *keyring) set(keys []*signingKey) {
	slices.SortFunc(keys, func(a, b *signingKey) int {
		if c := b.created.Compare(a.created); c != 0 {
			return c
		}
		return strings.Compare(a.kid, b.kid)
	})
	k.mu.Lock()
	k.keys = keys
	k.mu.Unlock()
}

// rotate makes a new key when there is none or the newest has signed for
// the rotation period, and forgets (and deletes) keys whose tokens have
// all expired.
func (k *keyring) rotate(ctx context.Context) error {
	now := k.now()
	k.mu.RLock()
	keys := slices.Clone(k.keys)
	k.mu.RUnlock()
	if len(keys) == 0 || !now.Before(keys[0].created.Add(k.rotation)) {
		sk, err := k.generate(ctx, now)
		if err != nil {
			return err
		}
		k.logger.Info("oauth signing key created", attrKid, sk.kid)
		keys = append([]*signingKey{sk}, keys...)
	}
	// Key i stopped signing when key i-1 was created.
	kept := []*signingKey{keys[0]}
	for i := 1; i < len(keys); i++ {
		if now.Before(keys[i-1].created.Add(k.retain)) {
			kept = append(kept, keys[i])
			continue
		}
		if err := k.store.DeleteObject(ctx, store.KindOAuthKey, keys[i].kid); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("delete signing key %s: %w", keys[i].kid, err)
		}
		k.logger.Info("oauth signing key retired", attrKid, keys[i].kid)
	}
	k.set(kept)
	return nil
}

func (k *keyring) generate(ctx context.Context, now time.Time) (*signingKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate signing key: %w", err)
	}
	jwk := jose.JSONWebKey{Key: &priv.PublicKey}
	thumb, err := jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("signing key thumbprint: %w", err)
	}
	kid := base64.RawURLEncoding.EncodeToString(thumb)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("encode signing key: %w", err)
	}
	nonce := make([]byte, k.aead.NonceSize())
	rand.Read(nonce)
	rec := keyRecord{Alg: string(jose.ES256), Created: now.UTC(), Sealed: k.aead.Seal(nonce, nonce, der, []byte(kid))}
	doc, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	if _, err := k.store.PutObject(ctx, store.KindOAuthKey, kid, doc); err != nil {
		return nil, fmt.Errorf("store signing key: %w", err)
	}
	return newSigningKey(kid, rec.Created, priv)
}

func (k *keyring) open(o store.Object) (*signingKey, error) {
	var rec keyRecord
	if err := json.Unmarshal(o.Doc, &rec); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if rec.Alg != string(jose.ES256) {
		return nil, fmt.Errorf("unsupported algorithm %q", rec.Alg)
	}
	ns := k.aead.NonceSize()
	if len(rec.Sealed) < ns {
		return nil, errors.New("sealed key too short")
	}
	der, err := k.aead.Open(nil, rec.Sealed[:ns], rec.Sealed[ns:], []byte(o.Name))
	if err != nil {
		return nil, errors.New("cannot unseal")
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	priv, ok := pk.(*ecdsa.PrivateKey)
	if !ok || priv.Curve != elliptic.P256() {
		return nil, errors.New("not a P-256 key")
	}
	return newSigningKey(o.Name, rec.Created, priv)
}

func newSigningKey(kid string, created time.Time, priv *ecdsa.PrivateKey) (*signingKey, error) {
	// RFC 9068 section 2.1: access tokens are typed at+jwt, so that an
	// ID token or another JWT cannot be passed off as one.
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: kid}},
		(&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		return nil, fmt.Errorf("signer: %w", err)
	}
	return &signingKey{kid: kid, created: created, priv: priv, signer: signer}, nil
}

// sign serialises claims as a JWT signed by the newest key.
func (k *keyring) sign(claims any) (string, error) {
	k.mu.RLock()
	if len(k.keys) == 0 {
		k.mu.RUnlock()
		return "", errors.New("no signing key")
	}
	signer := k.keys[0].signer
	k.mu.RUnlock()
	return jwt.Signed(signer).Claims(claims).Serialize()
}

func (k *keyring) public() jose.JSONWebKeySet {
	k.mu.RLock()
	defer k.mu.RUnlock()
	set := jose.JSONWebKeySet{Keys: make([]jose.JSONWebKey, 0, len(k.keys))}
	for _, sk := range k.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &sk.priv.PublicKey, KeyID: sk.kid, Algorithm: string(jose.ES256), Use: "sig"})
	}
	return set
}
