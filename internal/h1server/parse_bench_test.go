package h1server

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

var benchHead = []byte("POST /mcp/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
	"Mcp-Session-Id: abc\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: 97\r\n\r\n")

func BenchmarkParseRequest(b *testing.B) {
	b.Run("parseRequest", func(b *testing.B) {
		b.ReportAllocs()
		var req http.Request
		for range b.N {
			if !parseRequest(benchHead, &req) {
				b.Fatal("not taken")
			}
		}
	})
	b.Run("ReadRequest", func(b *testing.B) {
		b.ReportAllocs()
		var r bytes.Reader
		br := bufio.NewReader(nil)
		for range b.N {
			r.Reset(benchHead)
			br.Reset(&r)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
}
