package config

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Signing algorithms of a private_key_jwt client assertion.
const (
	AlgES256 = "ES256"
	AlgRS256 = "RS256"
)

// minRSABits is the smallest RSA key accepted for RS256 (RFC 7518 3.3).
const minRSABits = 2048

// ParsePrivateKey reads the first private key in PEM data: PKCS#8
// ("PRIVATE KEY"), PKCS#1 RSA ("RSA PRIVATE KEY") or SEC1 EC ("EC PRIVATE
// KEY"); other blocks (a certificate, EC parameters) are skipped. Errors
// describe the problem and never quote the data.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	found := false
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		found = true
		if strings.Contains(b.Headers["Proc-Type"], "ENCRYPTED") || b.Type == "ENCRYPTED PRIVATE KEY" {
			return nil, errors.New("the PEM private key is encrypted; give it unencrypted")
		}
		var key any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			// x509's messages describe the format, never the key.
			return nil, fmt.Errorf("the %s PEM block does not parse: %v", b.Type, err)
		}
		switch k := key.(type) {
		case *rsa.PrivateKey:
			if k.N.BitLen() < minRSABits {
				return nil, fmt.Errorf("RSA key of %d bits; want at least %d", k.N.BitLen(), minRSABits)
			}
			return k, nil
		case *ecdsa.PrivateKey:
			if k.Curve != elliptic.P256() {
				return nil, fmt.Errorf("EC key on %s; want P-256 (ES256)", k.Curve.Params().Name)
			}
			return k, nil
		case ed25519.PrivateKey:
			return nil, errors.New("an Ed25519 key; want RSA or EC P-256")
		default:
			return nil, fmt.Errorf("a key of type %T; want RSA or EC P-256", key)
		}
	}
	if !found {
		return nil, errors.New("not PEM (want a -----BEGIN PRIVATE KEY----- block)")
	}
	return nil, errors.New("no private key among the PEM blocks (want PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")
}

// SigningAlgFor checks alg against key and returns the algorithm to use:
// alg, or the key's own when alg is "".
func SigningAlgFor(key crypto.Signer, alg string) (string, error) {
	switch key.(type) {
	case *ecdsa.PrivateKey:
		if alg == "" || alg == AlgES256 {
			return AlgES256, nil
		}
	case *rsa.PrivateKey:
		if alg == "" || alg == AlgRS256 {
			return AlgRS256, nil
		}
	default:
		return "", fmt.Errorf("a key of type %T; want RSA or EC P-256", key)
	}
	return "", fmt.Errorf("%s does not fit the key (an %s key)", alg, keyKind(key))
}

func keyKind(key crypto.Signer) string {
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		return "EC"
	}
	return "RSA"
}

// ClientKey loads the private_key_jwt key of a (from private_key or
// private_key_file) and the algorithm it signs with. Errors name the
// field and never quote the key.
func (a *Auth) ClientKey() (crypto.Signer, string, error) {
	var data []byte
	field := "private_key"
	switch {
	case a.PrivateKey != "" && a.PrivateKeyFile != "":
		return nil, "", errors.New("private_key and private_key_file are both set")
	case a.PrivateKey != "":
		data = []byte(a.PrivateKey)
	case a.PrivateKeyFile != "":
		field = "private_key_file"
		b, err := os.ReadFile(a.PrivateKeyFile)
		if err != nil {
			// A path is not a secret: naming it makes the message actionable.
			var pe *os.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return nil, "", fmt.Errorf("private_key_file: cannot read %s: %v", a.PrivateKeyFile, err)
		}
		data = b
	default:
		return nil, "", errors.New("no private_key or private_key_file")
	}
	key, err := ParsePrivateKey(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", field, err)
	}
	alg, err := SigningAlgFor(key, a.SigningAlg)
	if err != nil {
		return nil, "", fmt.Errorf("signing_alg: %w", err)
	}
	return key, alg, nil
}
