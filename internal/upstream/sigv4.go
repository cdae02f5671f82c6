package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/mcpgate/mcpgate/internal/config"
)

// AWS Signature Version 4 for servers with auth type aws_sigv4 (SPEC C3):
// AWS-hosted MCP endpoints (API Gateway, Lambda function URLs, Bedrock
// AgentCore) that authenticate each request by its signature. The
// algorithm is the AWS SDK's signer and the credentials come from the
// SDK's default chain; neither is reimplemented here.

// Headers the signer sets on a request (Authorization besides). They are
// credentials' company: a redirect that drops Authorization drops them too.
const (
	headerAmzDate          = "X-Amz-Date"
	headerAmzSecurityToken = "X-Amz-Security-Token"
	headerAmzContentSHA256 = "X-Amz-Content-Sha256"
)

// sigV4Headers are every header a signature consists of.
var sigV4Headers = []string{headerAuthorization, headerAmzDate, headerAmzSecurityToken, headerAmzContentSHA256}

// credentialChain names the AWS default credential chain in messages.
const credentialChain = "the AWS default credential chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
	"AWS_PROFILE with the shared config and credentials files, web identity via AWS_WEB_IDENTITY_TOKEN_FILE, " +
	"container or EC2 instance metadata)"

// sigV4 signs the requests of one aws_sigv4 server. The Manager shares one
// per server across its sessions, so the AWS configuration is loaded once
// and its credentials cache serves every session.
type sigV4 struct {
	server, region, service string
	signer                  *v4.Signer
	now                     func() time.Time // the signing clock; tests fix it

	mu sync.Mutex
	// creds is loaded on the first request (the gateway starts without
	// AWS credentials and without reading AWS files); nil until a load
	// succeeds. Retrieve is called for every request: the cache hands out
	// the current credentials and refreshes expiring temporary ones.
	creds aws.CredentialsProvider
	// load is awsconfig.LoadDefaultConfig, or a test's stand-in.
	load func(ctx context.Context, optFns ...func(*awsconfig.LoadOptions) error) (aws.Config, error)
}

// newSigV4 is the signer of srv, or nil when srv is not aws_sigv4.
func newSigV4(srv *config.Server) *sigV4 {
	if srv == nil || srv.Auth == nil || srv.Auth.Type != config.AuthAWSSigV4 {
		return nil
	}
	return &sigV4{
		server:  srv.Name,
		region:  srv.Auth.Region,
		service: srv.Auth.Service,
		signer:  v4.NewSigner(),
		now:     time.Now,
		load:    awsconfig.LoadDefaultConfig,
	}
}

// provider is the server's credentials cache, loading the AWS
// configuration on first use. A failed load is not remembered: the next
// request tries again.
func (s *sigV4) provider(ctx context.Context) (aws.CredentialsProvider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creds != nil {
		return s.creds, nil
	}
	cfg, err := s.load(ctx, awsconfig.WithRegion(s.region))
	if err != nil {
		return nil, s.authError(fmt.Errorf("load the AWS configuration for %s: %w", credentialChain, err))
	}
	p := cfg.Credentials
	if p == nil {
		return nil, s.authError(fmt.Errorf("no AWS credentials provider from %s", credentialChain))
	}
	if _, ok := p.(*aws.CredentialsCache); !ok {
		p = aws.NewCredentialsCache(p)
	}
	s.creds = p
	return p, nil
}

// forget drops the loaded configuration if it is still p.
func (s *sigV4) forget(p aws.CredentialsProvider) {
	s.mu.Lock()
	if s.creds == p {
		s.creds = nil
	}
	s.mu.Unlock()
}

func (s *sigV4) authError(err error) *Error {
	return &Error{Server: s.server, Kind: KindAuth, Err: fmt.Errorf("aws_sigv4: %w", err)}
}

// sign signs req in place over its method, URL, headers and body, with the
// current credentials and the time now. It must be the last change to the
// request's headers: any header set after it (other than the few SigV4
// ignores, like User-Agent) is not covered, and one that is changed breaks
// the signature. An earlier signature on req (a redirect's copy) is
// replaced.
func (s *sigV4) sign(req *http.Request) error {
	ctx := req.Context()
	p, err := s.provider(ctx)
	if err != nil {
		return err
	}
	creds, err := p.Retrieve(ctx)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		// The chain is resolved when the configuration loads (which
		// provider, which profile): load it again next time, so that
		// credentials provided after a failure (variables of a restarted
		// sidecar, a credentials file written later) are found.
		s.forget(p)
		return s.authError(fmt.Errorf("no AWS credentials from %s: %w", credentialChain, err))
	}
	body, err := requestBody(req)
	if err != nil {
		return &Error{Server: s.server, Kind: KindInternal, Err: fmt.Errorf("aws_sigv4: read the request body: %w", err)}
	}
	for _, h := range sigV4Headers {
		req.Header.Del(h)
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	// Sent explicitly so the upstream (and whoever debugs it) sees what
	// the signature covers; signed like every other header.
	req.Header.Set(headerAmzContentSHA256, payloadHash)
	if err := s.signer.SignHTTP(ctx, creds, req, payloadHash, s.service, s.region, s.now()); err != nil {
		return s.authError(fmt.Errorf("sign the request: %w", err))
	}
	return nil
}

// requestBody is the exact body req will send. Requests built by
// newRequest carry GetBody, which hands out a fresh copy; any other body
// is read into memory and put back (request bodies are single JSON-RPC
// messages, bounded).
func requestBody(req *http.Request) ([]byte, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	data, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(data))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
	req.ContentLength = int64(len(data))
	return data, nil
}

// onRedirect wraps the redirect policy of a signed server's client: a
// redirect the policy lets through is signed again for its own method and
// URL when credentials may follow it (credentialSafeRedirect), and goes
// without any signature header otherwise. The copy net/http makes of the
// original request still carries the old signature, which covers the old
// URL and is of no use anywhere else.
func (s *sigV4) onRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if next == nil {
			next = sameOriginRedirect
		}
		if err := next(req, via); err != nil {
			return err
		}
		if !credentialSafeRedirect(via[0].URL, req.URL) {
			for _, h := range sigV4Headers {
				req.Header.Del(h)
			}
			return nil
		}
		return s.sign(req)
	}
}

// sigV4Preview is the signature headers of a request to srv with headers
// h, for Preview: signed by the real signer, so the scope and the signed
// headers are what a request carries, but with a placeholder access key
// (credentials exist only at request time; preview reads no AWS files)
// and the signature masked.
func sigV4Preview(method string, srv *config.Server, h http.Header) http.Header {
	const scheme = "AWS4-HMAC-SHA256"
	req, err := http.NewRequest(method, srv.URL, nil)
	if err != nil {
		return http.Header{headerAuthorization: {scheme + " <signed per request>"}}
	}
	req.Header = h.Clone()
	req.Header.Set(headerAmzContentSHA256, "<sha256 of the body>")
	creds := aws.Credentials{AccessKeyID: "<access key id>", SecretAccessKey: "preview"}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, "preview", srv.Auth.Service, srv.Auth.Region, time.Now()); err != nil {
		return http.Header{headerAuthorization: {scheme + " <signed per request>"}}
	}
	auth := req.Header.Get(headerAuthorization)
	if i := strings.LastIndex(auth, "Signature="); i >= 0 {
		auth = auth[:i] + "Signature=****"
	}
	return http.Header{
		headerAuthorization:    {auth},
		headerAmzDate:          {req.Header.Get(headerAmzDate)},
		headerAmzContentSHA256: {"<sha256 of the body>"},
	}
}
