package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/egressd/egressd/cmd/egressd/internal/config"
)

// The HTTP face's flags: plain HTTP only on loopback unless asked for, TLS files in pairs,
// only with the leaser role and a config that lets someone in.
func TestLeaseHTTPFlags(t *testing.T) {
	withCrawlers := config.File{LeaseHTTP: &config.LeaseHTTP{Crawlers: []config.Crawler{{Name: "s", TokenSHA256: strings.Repeat("ab", 32)}}}}
	leaserRole := roleSet{leaser: true}
	cases := []struct {
		name  string
		f     leaseHTTPFlags
		cfg   config.File
		roles roleSet
		err   string // "" serves
	}{
		{"off", leaseHTTPFlags{}, config.File{}, leaserRole, ""},
		{"loopback, plain", leaseHTTPFlags{listen: "127.0.0.1:0"}, withCrawlers, leaserRole, ""},
		{"localhost, plain", leaseHTTPFlags{listen: "localhost:0"}, withCrawlers, leaserRole, ""},
		{"every interface, plain", leaseHTTPFlags{listen: ":0"}, withCrawlers, leaserRole, "not a loopback address"},
		{"0.0.0.0, plain", leaseHTTPFlags{listen: "0.0.0.0:0"}, withCrawlers, leaserRole, "--lease-http-plaintext"},
		{"no crawlers", leaseHTTPFlags{listen: "127.0.0.1:0"}, config.File{}, leaserRole, "no leaseHTTP.crawlers"},
		{"no leaser role", leaseHTTPFlags{listen: "127.0.0.1:0"}, withCrawlers, roleSet{prober: true}, "add leaser to --roles"},
		{"cert without key", leaseHTTPFlags{listen: "127.0.0.1:0", certFile: "c.pem"}, withCrawlers, leaserRole, "go together"},
		{"missing cert file", leaseHTTPFlags{listen: "127.0.0.1:0", certFile: "/nonexistent/c.pem", keyFile: "/nonexistent/k.pem"}, withCrawlers, leaserRole, "--lease-http-tls-cert"},
		{"TLS flags without listen", leaseHTTPFlags{certFile: "c", keyFile: "k"}, withCrawlers, leaserRole, "need --lease-http-listen"},
		{"bad address", leaseHTTPFlags{listen: "127.0.0.1"}, withCrawlers, leaserRole, "--lease-http-listen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hc, _, err := tc.f.listener(tc.cfg, tc.roles)
			if hc != nil {
				defer hc.Listener.Close()
			}
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			case tc.err == "" && tc.f.listen != "" && (hc == nil || len(hc.Crawlers) != 1 || hc.Crawlers[0].Name != "s"):
				t.Fatalf("config %+v", hc)
			}
		})
	}
}

// egressd lease token prints a token and the entry whose hash is that token's.
func TestLeaseTokenCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := leaseTokenCmd([]string{"scrapy-1"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	m := regexp.MustCompile(`(?s)#   (egt_[0-9a-f]{64})\n.*- name: "scrapy-1"\n  tokenSHA256: ([0-9a-f]{64})\n`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("output:\n%s", out.String())
	}
	if sum := sha256.Sum256([]byte(m[1])); hex.EncodeToString(sum[:]) != m[2] {
		t.Fatal("the entry's hash is not the token's")
	}
	cfg, err := config.Parse([]byte("providers:\n  - {name: local, type: local}\nleaseHTTP:\n  crawlers:\n" +
		regexp.MustCompile(`(?m)^`).ReplaceAllString(strings.SplitN(out.String(), "crawlers):\n", 2)[1], "    ")))
	if err != nil || cfg.LeaseHTTP.Crawlers[0].Name != "scrapy-1" {
		t.Fatalf("the printed entry does not parse: %v", err)
	}
	if code := leaseTokenCmd(nil, &out, &errOut); code != 2 {
		t.Fatalf("no name: exit %d", code)
	}
}
