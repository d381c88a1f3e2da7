package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/egressd/egressd/client"
	"github.com/egressd/egressd/cmd/egressd/internal/config"
	"github.com/egressd/egressd/workers/gateway"
)

// gatewayFlags are the flags of the gateway role (egressd run --gateway-listen, egressd gateway).
type gatewayFlags struct {
	listen         string
	plaintext      bool
	leaseTTL       time.Duration
	idle           time.Duration
	attributes     string
	blockStatus    string
	markers        stringList
	connectFailure string
	infoHeaders    bool
	maxProxies     int
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (f *gatewayFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "gateway-listen", "", "serve the gateway, one forward proxy endpoint for any HTTP client, here (empty, the default, disables; needs leaseHTTP.crawlers in the config)")
	fs.BoolVar(&f.plaintext, "gateway-plaintext", false, "allow the gateway on a non-loopback address (crawler tokens then cross the network in clear, as with any HTTP proxy)")
	fs.DurationVar(&f.leaseTTL, "gateway-lease-ttl", time.Minute, "TTL of the gateway's leases: renewed at a third of it while held; a killed gateway leaves them at most this long")
	fs.DurationVar(&f.idle, "gateway-idle-release", 30*time.Second, "give a lease back once nothing used it for this long")
	fs.StringVar(&f.attributes, "gateway-attributes", strings.Join(gateway.DefaultAttributes, ","), "username keys taken as selector attributes, besides pool (comma list)")
	fs.StringVar(&f.blockStatus, "gateway-block-status", "403,429,503", "origin status codes reported as blocked (comma list; empty for none)")
	fs.Var(&f.markers, "gateway-block-marker", "a string whose presence in a plain-HTTP body is reported as blocked (repeatable)")
	fs.StringVar(&f.connectFailure, "gateway-connect-failure", "blocked", "what a proxy that cannot reach the site is reported as: blocked, failed or none")
	fs.BoolVar(&f.infoHeaders, "gateway-info-headers", false, "add X-Egressd-Proxy and X-Egressd-Session to answers (off: nothing tells a crawler's HTTP stack about egressd)")
	fs.IntVar(&f.maxProxies, "gateway-max-proxies-per-route", 16, "proxies a session-less route holds leases on at most")
}

// config checks the flags against the config file and listens.
func (f *gatewayFlags) config(cfg config.File) (gateway.Config, error) {
	if cfg.LeaseHTTP == nil {
		return gateway.Config{}, errors.New("--gateway-listen: the config has no leaseHTTP.crawlers, so no crawler could be let in (egressd lease token makes an entry)")
	}
	rules, err := gateway.ParseRules(f.blockStatus, f.markers, f.connectFailure)
	if err != nil {
		return gateway.Config{}, fmt.Errorf("--gateway-block-status, --gateway-block-marker or --gateway-connect-failure: %w", err)
	}
	if f.leaseTTL < 5*time.Second || f.leaseTTL > time.Hour {
		return gateway.Config{}, fmt.Errorf("--gateway-lease-ttl %s: must be from 5s to 1h (the lease service's bounds)", f.leaseTTL)
	}
	if f.idle <= 0 || f.maxProxies < 1 {
		return gateway.Config{}, errors.New("--gateway-idle-release and --gateway-max-proxies-per-route must be positive")
	}
	loopback, err := isLoopbackAddr(f.listen)
	if err != nil {
		return gateway.Config{}, fmt.Errorf("--gateway-listen %q: %w", f.listen, err)
	}
	if !loopback && !f.plaintext {
		return gateway.Config{}, fmt.Errorf("--gateway-listen %q: not a loopback address, so say --gateway-plaintext (crawler tokens cross the network in clear)", f.listen)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return gateway.Config{}, listenError("--gateway-listen", f.listen, err, func(bool) string { return "stop it, or pass another --gateway-listen" })
	}
	return gateway.Config{Listener: ln, Crawlers: cfg.LeaseHTTP.GatewayCrawlers(), Attributes: splitList(f.attributes),
		Rules: &rules, LeaseTTL: f.leaseTTL, IdleRelease: f.idle, MaxProxiesPerRoute: f.maxProxies, InfoHeaders: f.infoHeaders}, nil
}

func buildGateway(_ context.Context, d *daemon) (runner, error) {
	cfg, err := d.f.gateway.config(d.cfg)
	if err != nil {
		return nil, err
	}
	cfg.Client = client.New(d.nc)
	cfg.Observer = d.obs
	cfg.Log = d.log.With("role", "gateway")
	g, err := gateway.New(cfg)
	if err != nil {
		cfg.Listener.Close()
		return nil, err
	}
	d.reload.gateway = g
	d.log.Info("serving the gateway", "url", "http://"+cfg.Listener.Addr().String())
	return g.Run, nil
}

// gatewayCmd is `egressd gateway`: the gateway alone, on a NATS server others run, in as
// many replicas as wanted (each holds its own leases; sessions live in the lease service).
func gatewayCmd(ctx context.Context, args []string, stderr io.Writer) int {
	if slices.ContainsFunc(args, func(a string) bool { return a == "--roles" || strings.HasPrefix(a, "--roles=") || a == "-roles" }) {
		fmt.Fprintln(stderr, "egressd gateway: runs the gateway role only; use egressd run --roles for others")
		return 2
	}
	return runCmd(ctx, append([]string{"--roles", "gateway", "--ui-listen", ""}, args...), stderr)
}
