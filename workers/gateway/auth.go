package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Crawler is one crawler the gateway lets in: the same entries as the lease HTTP face's
// (leaseHTTP.crawlers), the name being the holder of every lease taken for it. Only the
// token's SHA-256 is kept.
type Crawler struct {
	Name        string
	TokenSHA256 [32]byte
}

// crawlers is the reloadable list of crawlers.
type crawlers struct{ list atomic.Pointer[[]Crawler] }

func checkCrawlers(cs []Crawler) error {
	names, hashes := map[string]bool{}, map[[32]byte]bool{}
	for i, c := range cs {
		switch {
		case c.Name == "" || len(c.Name) > 128:
			return fmt.Errorf("gateway: crawler %d: the name must be 1 to 128 bytes", i)
		case names[c.Name]:
			return fmt.Errorf("gateway: crawler %q appears twice", c.Name)
		case hashes[c.TokenSHA256] || c.TokenSHA256 == [32]byte{}:
			return fmt.Errorf("gateway: crawler %q has no token hash, or another crawler's", c.Name)
		}
		names[c.Name], hashes[c.TokenSHA256] = true, true
	}
	return nil
}

func (c *crawlers) set(cs []Crawler) error {
	if err := checkCrawlers(cs); err != nil {
		return err
	}
	cs = slices.Clone(cs)
	c.list.Store(&cs)
	return nil
}

// errNoCredentials and errUnknownToken are why a request is refused with 407; neither says
// anything about the token given.
var (
	errNoCredentials = errors.New("send Proxy-Authorization: Basic with a crawler token as the password (curl -x http://USER:TOKEN@gateway)")
	errUnknownToken  = errors.New("the password is not a known crawler token (leaseHTTP.crawlers; egressd lease token makes one)")
)

// authenticate reads Proxy-Authorization: Basic and returns the username and the crawler
// whose token is the password. Every crawler's hash is compared, in constant time, so the
// time taken says nothing about which one came close.
func (c *crawlers) authenticate(header string) (username string, crawler string, err error) {
	scheme, enc, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", errNoCredentials
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", errNoCredentials
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok || pass == "" {
		return "", "", errNoCredentials
	}
	sum := sha256.Sum256([]byte(pass))
	found := ""
	for _, cr := range *c.list.Load() {
		if subtle.ConstantTimeCompare(sum[:], cr.TokenSHA256[:]) == 1 {
			found = cr.Name
		}
	}
	if found == "" {
		return "", "", errUnknownToken
	}
	return user, found, nil
}
