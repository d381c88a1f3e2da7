package config

import (
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/egressd/egressd/workers/gateway"
	"github.com/egressd/egressd/workers/leaser"
)

// LeaseHTTP is the `leaseHTTP:` block: the crawlers that may use the lease service's
// HTTP face, each with the SHA-256 of its bearer token (egressd lease token makes both).
type LeaseHTTP struct {
	Crawlers []Crawler `yaml:"crawlers"`
}

// Crawler is one crawler let in through the HTTP face.
type Crawler struct {
	Name        string `yaml:"name"`
	TokenSHA256 string `yaml:"tokenSHA256"`
}

// validate names the entry at fault; it never quotes a hash (not secret, but no use either).
func (c *LeaseHTTP) validate() error {
	if c == nil {
		return nil
	}
	var errs []error
	if len(c.Crawlers) == 0 {
		errs = append(errs, errors.New("leaseHTTP.crawlers: at least one crawler is required"))
	}
	names, hashes := map[string]bool{}, map[string]bool{}
	for i, cr := range c.Crawlers {
		at := fmt.Sprintf("leaseHTTP.crawlers[%d]", i)
		if cr.Name == "" || len(cr.Name) > 256 {
			errs = append(errs, fmt.Errorf("%s.name: is required, at most 256 bytes", at))
		} else if names[cr.Name] {
			errs = append(errs, fmt.Errorf("%s.name: duplicate crawler name %q", at, cr.Name))
		}
		names[cr.Name] = true
		if b, err := hex.DecodeString(cr.TokenSHA256); err != nil || len(b) != 32 {
			errs = append(errs, fmt.Errorf("%s.tokenSHA256: must be 64 hex digits, the SHA-256 of the token (egressd lease token prints it)", at))
		} else if hashes[cr.TokenSHA256] {
			errs = append(errs, fmt.Errorf("%s.tokenSHA256: the same token as another crawler", at))
		}
		hashes[cr.TokenSHA256] = true
	}
	return errors.Join(errs...)
}

// LeaserCrawlers are the crawlers as the lease service takes them.
func (c *LeaseHTTP) LeaserCrawlers() []leaser.Crawler {
	var out []leaser.Crawler
	for _, cr := range c.Crawlers {
		var h [32]byte
		b, _ := hex.DecodeString(cr.TokenSHA256) // validated
		copy(h[:], b)
		out = append(out, leaser.Crawler{Name: cr.Name, TokenSHA256: h})
	}
	return out
}

// GatewayCrawlers are the crawlers as the gateway takes them: the same tokens and names.
func (c *LeaseHTTP) GatewayCrawlers() []gateway.Crawler {
	var out []gateway.Crawler
	for _, cr := range c.LeaserCrawlers() {
		out = append(out, gateway.Crawler{Name: cr.Name, TokenSHA256: cr.TokenSHA256})
	}
	return out
}
