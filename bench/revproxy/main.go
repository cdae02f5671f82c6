// Command revproxy is a reference point for bench/run.sh (BENCH_REFPROXY=1):
// net/http/httputil.ReverseProxy in front of one upstream, with no MCP
// logic. Its cost per call is roughly the floor for any proxy built on
// net/http's server and client, which puts mcpgate's numbers in context.
//
//	go run ./bench/revproxy -listen 127.0.0.1:0 -target http://127.0.0.1:4200
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	target := flag.String("target", "", "upstream base URL, e.g. http://127.0.0.1:4200")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		log.Fatalf("revproxy: bad -target %q", *target)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// Pool like mcpgate's upstream client does, so that c=64 reuses
	// connections instead of dialling.
	rp.Transport = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "revproxy listening on http://%s -> %s\n", ln.Addr(), u)
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	log.Fatal(srv.Serve(ln))
}
