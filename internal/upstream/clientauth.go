package upstream

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// private_key_jwt client authentication (RFC 7523 2.2, 3; OpenID Connect
// Core 9).

const (
	clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
	// clientAssertionTTL is the assertion's lifetime: it is used at once.
	clientAssertionTTL = 60 * time.Second
)

// clientAssertion is a JWT signed with the configured key, for a token
// request: iss = sub = the client id, aud = the one value aud, a random
// jti, iat now and exp 60 s later. aud is the authorization server's issuer
// identifier when the endpoint was read from the pinned authorization
// server's metadata (it named both; the
// current guidance, draft-ietf-oauth-rfc7523bis, and the MCP conformance
// suite want the issuer, which an assertion for one server cannot be
// replayed at another with), else the configured token_url (RFC 7523 3:
// the token endpoint URL may identify the server). The key is loaded again for each
// assertion, so a rotated private_key_file is picked up. Errors name the
// field, never the key.
func (s *tokenSource) clientAssertion(aud string) (string, error) {
	key, alg, err := s.auth.ClientKey()
	if err != nil {
		return "", s.fail(KindAuth, 0, "oauth2 private_key_jwt: %v", err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(alg), Key: key},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", s.fail(KindInternal, 0, "oauth2 private_key_jwt: signer: %v", err)
	}
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", s.fail(KindInternal, 0, "oauth2 private_key_jwt: jti: %v", err)
	}
	now := s.now()
	claims := jwt.Claims{
		Issuer:   s.clientID,
		Subject:  s.clientID,
		Audience: jwt.Audience{aud},
		ID:       hex.EncodeToString(jti[:]),
		IssuedAt: jwt.NewNumericDate(now),
		Expiry:   jwt.NewNumericDate(now.Add(clientAssertionTTL)),
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		return "", s.fail(KindInternal, 0, "oauth2 private_key_jwt: sign: %v", err)
	}
	return tok, nil
}
