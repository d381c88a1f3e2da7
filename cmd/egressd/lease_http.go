package main

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"

	"github.com/egressd/egressd/cmd/egressd/internal/config"

	"github.com/egressd/egressd/workers/leaser"
)

// leaseHTTPFlags are the flags of the HTTP face on egressd run.
type leaseHTTPFlags struct {
	listen, certFile, keyFile string
	plaintext                 bool
}

func (f *leaseHTTPFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "lease-http-listen", "", "also serve the lease service as JSON over HTTP here, for crawlers without a NATS client (empty, the default, disables; needs leaseHTTP.crawlers in the config)")
	fs.StringVar(&f.certFile, "lease-http-tls-cert", "", "serve the lease HTTP face over TLS with this certificate (PEM; with --lease-http-tls-key)")
	fs.StringVar(&f.keyFile, "lease-http-tls-key", "", "the private key of --lease-http-tls-cert (PEM)")
	fs.BoolVar(&f.plaintext, "lease-http-plaintext", false, "allow the lease HTTP face without TLS on a non-loopback address (bearer tokens and proxy credentials then cross the network in clear)")
}

// listener checks the flags against the config and the roles, and listens. Plain HTTP is
// refused beyond loopback unless asked for: the requests carry bearer tokens and the replies
// proxy credentials.
// The certificate, when there is one, is returned too: a reload (SIGHUP) reads its files again.
func (f *leaseHTTPFlags) listener(cfg config.File, roles roleSet) (*leaser.HTTPConfig, *certFiles, error) {
	if f.listen == "" {
		if f.certFile != "" || f.keyFile != "" || f.plaintext {
			return nil, nil, errors.New("--lease-http-tls-cert, --lease-http-tls-key and --lease-http-plaintext need --lease-http-listen")
		}
		return nil, nil, nil
	}
	if !roles.leaser {
		return nil, nil, errors.New("--lease-http-listen: the leaser role serves it; add leaser to --roles")
	}
	if cfg.LeaseHTTP == nil {
		return nil, nil, errors.New("--lease-http-listen: the config has no leaseHTTP.crawlers, so no request could be let in (egressd lease token makes an entry)")
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, nil, errors.New("--lease-http-tls-cert and --lease-http-tls-key go together")
	}
	var (
		tc   *tls.Config
		cert *certFiles
	)
	if f.certFile != "" {
		var err error
		if cert, err = newCertFiles(f.certFile, f.keyFile); err != nil {
			return nil, nil, err
		}
		tc = cert.tlsConfig()
	}
	loopback, err := isLoopbackAddr(f.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--lease-http-listen %q: %w", f.listen, err)
	}
	if !loopback && tc == nil && !f.plaintext {
		return nil, nil, fmt.Errorf("--lease-http-listen %q: not a loopback address, so give it TLS (--lease-http-tls-cert/--lease-http-tls-key) or say --lease-http-plaintext", f.listen)
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--lease-http-listen: %w", err)
	}
	return &leaser.HTTPConfig{Listener: ln, TLS: tc, Crawlers: cfg.LeaseHTTP.LeaserCrawlers()}, cert, nil
}

// leaseTokenCmd is `egressd lease token NAME`: a new random token for a crawler and the config
// entry that lets it in. Only the hash goes into the config.
func leaseTokenCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" || args[0][0] == '-' {
		fmt.Fprintln(stderr, "usage: egressd lease token CRAWLER-NAME")
		return 2
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		fmt.Fprintln(stderr, "egressd lease token:", err)
		return 1
	}
	token := "egt_" + hex.EncodeToString(b)
	h := leaser.TokenHash(token)
	fmt.Fprintf(stdout, "# The crawler's bearer token (keep it secret; it is shown only now):\n#   %s\n", token)
	fmt.Fprintf(stdout, "# The config entry (under leaseHTTP.crawlers):\n- name: %q\n  tokenSHA256: %s\n", args[0], hex.EncodeToString(h[:]))
	return 0
}
