package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/mcpgate/mcpgate/internal/config"
	"github.com/mcpgate/mcpgate/internal/exepages"
	"github.com/mcpgate/mcpgate/internal/h1server"
	"github.com/mcpgate/mcpgate/internal/netaddr"
)

// drainTimeout bounds how long shutdown waits for in-flight calls.
const drainTimeout = 10 * time.Second

type serveCommand struct {
	stderr io.Writer
	// ready, when set, receives the bound address (tests).
	ready func(addr string)
}

func (c *serveCommand) Run(ctx context.Context, args []string) error {
	// SIGHUP reloads the config (below); one arriving while starting
	// waits for it rather than killing the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := fs.String("listen", "", "listen address (overrides the config's listen)")
	var rf runFlags
	rf.register(fs)
	cfg, log, err := rf.load(fs, args, c.stderr)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	exeMode, trimExe := exePages(os.Getenv, log)
	if trimExe {
		trimExecutable(exepages.Unmap, "start", log)
	}
	stk, err := build(ctx, cfg, log, cfg.Listen)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		_ = stk.close(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	if err := checkBound(cfg, ln.Addr()); err != nil {
		_ = ln.Close()
		_ = stk.close(context.Background())
		return err
	}
	g := stk.gw
	// The address bound, not the text, decides whether the gateway
	// serves loopback only (its Host check and own base URL).
	g.Listening(ln.Addr())
	g.Start(ctx)
	// Reload without a restart: SIGHUP, POST /admin/v1/reload, and with
	// reload.watch the file's changes (reload.go).
	rl := newReloader(rf.config, *listen, cfg, stk, log)
	stk.reload.p.Store(rl)
	rctx, stopReload := context.WithCancel(ctx)
	var reloads sync.WaitGroup
	// Reloads end before the stack they change is closed.
	stopReloads := func() { stopReload(); reloads.Wait() }
	defer stopReloads()
	reloads.Go(func() {
		for {
			select {
			case <-hup:
				_, _ = rl.reload(rctx, "SIGHUP") // logged, counted and audited there
			case <-rctx.Done():
				return
			}
		}
	})
	reloads.Go(func() { rl.watch(rctx) })
	srv := newHTTPServer(stk.handler, cfg.Limits)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()
	var msrv *http.Server
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			_ = srv.Close()
			stopReloads()
			_ = stk.close(context.Background())
			return fmt.Errorf("metrics listen: %w", err)
		}
		msrv = &http.Server{Handler: metricsMux(g), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- msrv.Serve(mln) }()
		log.Info("metrics serving", "addr", "http://"+mln.Addr().String()+"/metrics")
	}
	// Started: what start-up alone touched of the executable need not
	// stay mapped (exepages.go).
	if trimExe {
		trimExecutable(exeMode, "serving", log)
	}
	log.Info("mcpgate serving", "addr", "http://"+ln.Addr().String()+"/mcp", "servers", len(cfg.Servers), "version", version())
	if c.ready != nil {
		c.ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		stopReloads()
		_ = stk.close(context.Background())
		return err
	case <-ctx.Done():
	}
	// The running config's: shutdown_delay takes effect on reload.
	if d := rl.current().ShutdownDelay; d > 0 {
		// Lame duck: still serving, no longer ready, so that the load
		// balancer stops sending here before the listener closes.
		log.Info("shutting down: /readyz answers 503; serving on for shutdown_delay", "delay", d.String())
		g.Drain()
		select {
		case <-time.After(d):
		case err := <-errc:
			stopReloads()
			_ = stk.close(context.Background())
			return err
		}
	}
	log.Info("shutting down: draining in-flight calls", "budget", drainTimeout)
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	g.Shutdown()
	if err := srv.Shutdown(dctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		log.Warn("http shutdown", "error", err)
	}
	_ = srv.Close()
	if msrv != nil {
		_ = msrv.Close()
	}
	stopReloads()
	if err := stk.close(dctx); err != nil {
		log.Warn("stopping upstreams", "error", err)
	}
	log.Info("stopped")
	return nil
}

// checkBound applies the loopback rules again to the address the listener
// actually bound: a listen text that names loopback ("localhost") may bind
// another address if the hosts file says so, and then it is exposed.
func checkBound(cfg *config.Config, addr net.Addr) error {
	loopback := netaddr.IsBoundLoopback(addr)
	if !loopback && cfg.AnonymousOnly() && (cfg.Auth == nil || !cfg.Auth.Anonymous) {
		return fmt.Errorf("refusing to serve on %s (bound %s, not loopback) without authentication: set auth.master_key or auth.keys, "+
			"or auth.anonymous: true to serve anyone who can reach it", cfg.Listen, addr)
	}
	if err := cfg.CheckPublicURL(loopback); err != nil {
		return fmt.Errorf("public_url (listening on %s): %w", addr, err)
	}
	return nil
}

// newHTTPServer is the gateway's listener, with the slow-client limits of
// the config (SPEC S23): a client must send its headers within
// read_header_timeout, and a keep-alive connection idle for idle_timeout
// is closed. There is no overall read or write timeout, as streams are
// long-lived: the gateway bounds each body read and each SSE event write
// itself.
//
// Plain HTTP/1.1 GET and POST requests are served by h1server's own
// connection loop, the rest by net/http (limits.standard_http_server:
// all by net/http).
func newHTTPServer(h http.Handler, l config.Limits) httpServer {
	l = l.OrDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
	if l.StandardHTTPServer {
		return srv
	}
	return h1server.New(srv)
}

// httpServer is what serve needs of its listener's server: net/http's or
// h1server's.
type httpServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// metricsMux serves /metrics alone (metrics_listen).
func metricsMux(g interface{ MetricsHandler() http.Handler }) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.MetricsHandler())
	return mux
}
