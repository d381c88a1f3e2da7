// Package httpface is the HTTP face of the lease service (docs/leases.md#http): the four
// endpoints as JSON over HTTP, for crawlers without a NATS client. It owns what is HTTP's
// alone: the listener and TLS, the bearer tokens of the crawlers and their constant-time
// check, the paths, methods and body limit, and the graceful shutdown. Everything a request
// means is the service's: the face hands each authenticated request to a Service in the same
// process, which runs the very handler, budget, span and metrics a NATS request gets and
// answers with the same body and error codes.
//
// In-process rather than over NATS, because the face's word on who the caller is must not be
// something a NATS client could claim too: the crawler a token proves travels as a Go value,
// never as a header another client could set. It also keeps the face one hop from the
// handlers, as fast as before the split.
package httpface

import (
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// PathPrefix is where the face serves the endpoints: POST /v1/leases/acquire, …
const PathPrefix = "/v1/leases/"

// endpoints are the lease service's endpoints of the wire contract (docs/leases.md), as the
// face serves them under PathPrefix.
var endpoints = []string{"acquire", "renew", "release", "report"}

// DefaultMaxBody bounds a request body. Every field of a request has a length limit (a
// selector of 32 pairs of 256 bytes is the largest), so real requests are far below it.
const DefaultMaxBody = 64 << 10

// maxNameLen bounds a crawler's name: it becomes the holder of the crawler's leases, and the
// service takes holders of at most 256 bytes.
const maxNameLen = 256

// Config turns the face on. Every request needs the bearer token of one of Crawlers.
type Config struct {
	Listener     net.Listener // the face serves on it once the service is ready, and closes it
	TLS          *tls.Config  // nil serves plain HTTP (the caller decides where that is fine)
	Crawlers     []Crawler
	MaxBodyBytes int64 // default DefaultMaxBody
}

// Crawler is one bearer token of the face. Only its SHA-256 is kept: the tokens are random
// and long (egressd lease token makes 256 bits), so a fast hash is as safe at rest as a slow
// one, and it costs nothing per request, where bcrypt would cost each request tens of
// milliseconds of CPU that an unauthenticated caller could make us spend.
type Crawler struct {
	Name        string   // the holder of every lease it acquires
	TokenSHA256 [32]byte // SHA-256 of the token
}

// TokenHash is the hash a Crawler keeps of token.
func TokenHash(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Check validates c and fills in its defaults.
func (c *Config) Check() error {
	if c.Listener == nil {
		return errors.New("leaser: HTTP: a listener is required")
	}
	if len(c.Crawlers) == 0 {
		return errors.New("leaser: HTTP: at least one crawler token is required")
	}
	if err := CheckCrawlers(c.Crawlers); err != nil {
		return err
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBody
	}
	return nil
}

// CheckCrawlers refuses a list with a name out of bounds, a name or token hash twice, or a
// missing hash.
func CheckCrawlers(crawlers []Crawler) error {
	names, hashes := map[string]bool{}, map[[32]byte]bool{}
	for i, cr := range crawlers {
		switch {
		case cr.Name == "" || len(cr.Name) > maxNameLen:
			return fmt.Errorf("leaser: HTTP: crawler %d: the name must be 1 to %d bytes", i, maxNameLen)
		case names[cr.Name]:
			return fmt.Errorf("leaser: HTTP: crawler %q appears twice", cr.Name)
		case hashes[cr.TokenSHA256]:
			return fmt.Errorf("leaser: HTTP: crawler %q has the token hash of another crawler", cr.Name)
		case cr.TokenSHA256 == [32]byte{}:
			return fmt.Errorf("leaser: HTTP: crawler %q has no token hash", cr.Name)
		}
		names[cr.Name], hashes[cr.TokenSHA256] = true, true
	}
	return nil
}
