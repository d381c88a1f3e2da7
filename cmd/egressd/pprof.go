package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/egressd/egressd/readside/metrics"
)

// pprofListener checks that addr is a loopback address before listening on it: the profiles
// show the process's memory and goroutines (request contents among them), so they are never
// served beyond this machine. "localhost" is accepted; any name is resolved by the listener,
// whose bound address is checked again.
func pprofListener(addr string) (net.Listener, error) {
	if err := checkPprofAddr(addr); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof-listen: %w", err)
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		ln.Close()
		return nil, fmt.Errorf("--pprof-listen %q: bound to %s, not a loopback address", addr, ln.Addr())
	}
	return ln, nil
}

// checkPprofAddr refuses an address that is not loopback, before anything starts.
func checkPprofAddr(addr string) error {
	loopback, err := isLoopbackAddr(addr)
	if err != nil {
		return fmt.Errorf("--pprof-listen %q: %w", addr, err)
	}
	if !loopback {
		return fmt.Errorf("--pprof-listen %q: must be a loopback address (127.0.0.1:port, [::1]:port or localhost:port); profiles are never served beyond this machine", addr)
	}
	return nil
}

// isLoopbackAddr says whether a host:port names this machine only: a loopback IP or
// "localhost" (a name resolves at listen time; "" and 0.0.0.0 are every interface).
func isLoopbackAddr(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// pprofHandler is net/http/pprof on its own mux, so the profiles are only on --pprof-listen
// and never on the metrics or status page servers.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

func servePprof(ctx context.Context, ln net.Listener) error {
	return metrics.Serve(ctx, ln, pprofHandler())
}
