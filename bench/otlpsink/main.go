// Command otlpsink is a trace receiver for bench/run.sh ({otlp}, the
// tracing variant of bench/features.sh): it takes OTLP/HTTP exports
// (POST /v1/traces) and answers 200 with an empty export response,
// without decoding them. What a gateway's tracing costs is then its own
// work (recording the spans, encoding and sending each batch), not a
// collector's. internal/tracing/tracetest's receiver decodes every
// export and keeps every span, for tests' assertions: under a benchmark's
// load (hundreds of MB of exports) it would hold them all and spend the
// machine's CPU decoding, beside the gateway measured.
//
//	go run ./bench/otlpsink -listen 127.0.0.1:0
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// maxExport bounds one export's body: the OTLP exporter's batches of
// 512 spans are far smaller.
const maxExport = 64 << 20

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	var exports, bytes atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, maxExport))
		if err != nil {
			http.Error(w, "export body: "+err.Error(), http.StatusBadRequest)
			return
		}
		exports.Add(1)
		bytes.Add(n)
		// An empty ExportTraceServiceResponse: no partial success to
		// report.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "exports %d bytes %d\n", exports.Load(), bytes.Load())
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("otlpsink: %v", err)
	}
	fmt.Fprintf(os.Stderr, "otlpsink listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
