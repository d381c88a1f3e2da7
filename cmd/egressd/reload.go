package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"sync/atomic"
	"syscall"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/workers/gateway"
	"github.com/egressd/egressd/workers/leaser"
)

// reloader applies the config file again on SIGHUP (systemd's ExecReload, `kill -HUP`) to
// what can change while egressd runs: the lease HTTP face's crawlers, so a crawler is added
// or a leaked token revoked without a restart, and its TLS certificate, so a renewed one is
// served. A config that does not load is refused whole and the running one kept; any other
// change is logged as waiting for a restart. Without a handler, SIGHUP would end the process.
type reloader struct {
	hup     chan os.Signal // notified from the start of run, so no SIGHUP ends the process
	path    string
	log     *slog.Logger
	running config.File
	leaser  *leaser.Leaser   // nil without the HTTP face
	gateway *gateway.Gateway // nil without the gateway
	cert    *certFiles       // nil without TLS on it
}

// newReloader catches SIGHUP from now on; stop releases it.
func newReloader(path string, log *slog.Logger) (r *reloader, stop func()) {
	r = &reloader{hup: make(chan os.Signal, 1), path: path, log: log}
	signal.Notify(r.hup, syscall.SIGHUP)
	return r, func() { signal.Stop(r.hup) }
}

// watch reloads on every SIGHUP until ctx ends. A SIGHUP that came before it started (while
// egressd was starting) is applied at once.
func (r *reloader) watch(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.hup:
			r.reload()
		}
	}
}

func (r *reloader) reload() {
	if r.cert != nil {
		if err := r.cert.load(); err != nil {
			r.log.Error("reload: the lease HTTP face keeps its certificate", "err", err)
		} else {
			r.log.Info("reload: lease HTTP face certificate loaded", "cert", r.cert.certFile)
		}
	}
	if r.path == "" {
		r.log.Info("reload: no --config, so no config to read again")
		return
	}
	cfg, err := config.Load(r.path)
	if err != nil {
		r.log.Error("reload: config refused, the running one is kept", "err", err)
		return
	}
	if r.leaser != nil {
		var crawlers []leaser.Crawler
		if cfg.LeaseHTTP != nil {
			crawlers = cfg.LeaseHTTP.LeaserCrawlers()
		}
		if err := r.leaser.SetHTTPCrawlers(crawlers); err != nil {
			r.log.Error("reload: lease HTTP crawlers refused, the running ones are kept", "err", err)
		} else {
			if len(crawlers) == 0 {
				r.log.Warn("reload: the config has no leaseHTTP.crawlers: the lease HTTP face now lets nobody in")
			}
			r.log.Info("reload: lease HTTP crawlers applied", "crawlers", len(crawlers))
		}
	}
	if r.gateway != nil {
		var crawlers []gateway.Crawler
		if cfg.LeaseHTTP != nil {
			crawlers = cfg.LeaseHTTP.GatewayCrawlers()
		}
		if err := r.gateway.SetCrawlers(crawlers); err != nil {
			r.log.Error("reload: gateway crawlers refused, the running ones are kept", "err", err)
		} else {
			r.log.Info("reload: gateway crawlers applied", "crawlers", len(crawlers))
		}
	}
	if pending := restartNeeded(r.running, cfg, r.leaser != nil || r.gateway != nil); len(pending) > 0 {
		r.log.Warn("reload: these parts of the config changed and apply at the next start", "parts", pending)
	}
}

// restartNeeded names the top-level parts of next that differ from running and are not
// applied by a reload.
func restartNeeded(running, next config.File, httpFace bool) []string {
	var out []string
	for _, p := range []struct {
		name string
		a, b any
	}{
		{"version", running.Version, next.Version},
		{"providers", running.Providers, next.Providers},
		{"events", running.Events, next.Events},
		{"leases", running.Leases, next.Leases},
	} {
		if !reflect.DeepEqual(p.a, p.b) {
			out = append(out, p.name)
		}
	}
	// Without the face running (no --lease-http-listen), its crawlers wait for a start too.
	if !httpFace && !reflect.DeepEqual(running.LeaseHTTP, next.LeaseHTTP) {
		out = append(out, "leaseHTTP")
	}
	return out
}

// certFiles serves a certificate that load replaces, read from its files.
type certFiles struct {
	certFile, keyFile string
	cert              atomic.Pointer[tls.Certificate]
}

func newCertFiles(certFile, keyFile string) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile}
	return c, c.load()
}

func (c *certFiles) load() error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("--lease-http-tls-cert: %w", err)
	}
	c.cert.Store(&cert)
	return nil
}

func (c *certFiles) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return c.cert.Load(), nil
	}}
}
