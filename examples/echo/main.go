// Command echo is a minimal, fast MCP server over streamable HTTP with a
// single "echo" tool. It is the benchmark upstream for mcpgate.
//
//	go run ./examples/echo -listen 127.0.0.1:4200
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/mcpgate/mcpgate/examples/echo/echoserver"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4200", "address to listen on")
	flag.Parse()
	log.SetOutput(os.Stderr)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", echoserver.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "echo listening on http://%s/mcp\n", ln.Addr())
	log.Fatal(srv.Serve(ln))
}
