package main

import (
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/cmd/egressd/internal/config"
)

// The gateway's flags: a config that lets someone in, rules that parse, a TTL the lease
// service takes, and a non-loopback address only when asked for; each refusal names its flag.
func TestGatewayFlags(t *testing.T) {
	withCrawlers := config.File{LeaseHTTP: &config.LeaseHTTP{Crawlers: []config.Crawler{{Name: "s", TokenSHA256: strings.Repeat("ab", 32)}}}}
	ok := gatewayFlags{listen: "127.0.0.1:0", leaseTTL: time.Minute, idle: time.Second, maxProxies: 4, blockStatus: "403,429", connectFailure: "blocked"}
	for _, c := range []struct {
		name string
		mod  func(*gatewayFlags)
		cfg  config.File
		err  string
	}{
		{"loopback", nil, withCrawlers, ""},
		{"no crawlers", nil, config.File{}, "no leaseHTTP.crawlers"},
		{"bad status", func(f *gatewayFlags) { f.blockStatus = "4o3" }, withCrawlers, "--gateway-block-status"},
		{"bad connect failure", func(f *gatewayFlags) { f.connectFailure = "maybe" }, withCrawlers, `"maybe"`},
		{"short TTL", func(f *gatewayFlags) { f.leaseTTL = time.Second }, withCrawlers, "--gateway-lease-ttl"},
		{"no idle release", func(f *gatewayFlags) { f.idle = 0 }, withCrawlers, "--gateway-idle-release"},
		{"every interface", func(f *gatewayFlags) { f.listen = "0.0.0.0:0" }, withCrawlers, "--gateway-plaintext"},
		{"every interface, said", func(f *gatewayFlags) { f.listen, f.plaintext = "0.0.0.0:0", true }, withCrawlers, ""},
		{"bad address", func(f *gatewayFlags) { f.listen = "127.0.0.1" }, withCrawlers, "--gateway-listen"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := ok
			if c.mod != nil {
				c.mod(&f)
			}
			gc, err := f.config(c.cfg)
			if gc.Listener != nil {
				defer gc.Listener.Close()
			}
			if c.err == "" {
				if err != nil || gc.Listener == nil || len(gc.Crawlers) != 1 || gc.Rules == nil {
					t.Fatalf("config = %+v, %v", gc, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("err = %v, want %q", err, c.err)
			}
		})
	}
}

func TestGatewayRoleIsParsed(t *testing.T) {
	if r, err := parseRoles("gateway"); err != nil || !r.gateway || r.leaser {
		t.Errorf("parseRoles(gateway) = %+v, %v", r, err)
	}
	if r, _ := parseRoles("all"); !r.gateway {
		t.Errorf("all leaves out the gateway")
	}
}
