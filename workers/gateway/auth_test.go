package gateway

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"
)

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestAuthenticate(t *testing.T) {
	var cs crawlers
	if err := cs.set([]Crawler{{Name: "c7", TokenSHA256: sha256.Sum256([]byte("tok-7"))}, {Name: "c8", TokenSHA256: sha256.Sum256([]byte("tok-8"))}}); err != nil {
		t.Fatal(err)
	}
	user, name, err := cs.authenticate(basic("c7-pool-web", "tok-8"))
	if err != nil || user != "c7-pool-web" || name != "c8" {
		t.Errorf("authenticate = %q, %q, %v; the token names the crawler, whatever the username says", user, name, err)
	}
	for _, h := range []string{"", "Bearer tok-7", "Basic !!!", basic("c7", ""), "Basic " + base64.StdEncoding.EncodeToString([]byte("nocolon"))} {
		if _, _, err := cs.authenticate(h); err != errNoCredentials {
			t.Errorf("authenticate(%q) = %v, want errNoCredentials", h, err)
		}
	}
	if _, _, err := cs.authenticate(basic("c7", "tok-9")); err != errUnknownToken {
		t.Errorf("an unknown token: %v", err)
	}
	// A reload takes effect from the next request: tok-7 is revoked.
	if err := cs.set([]Crawler{{Name: "c8", TokenSHA256: sha256.Sum256([]byte("tok-8"))}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cs.authenticate(basic("c7", "tok-7")); err != errUnknownToken {
		t.Errorf("a revoked token still passes: %v", err)
	}
	if err := cs.set([]Crawler{{Name: "a", TokenSHA256: sha256.Sum256([]byte("x"))}, {Name: "a", TokenSHA256: sha256.Sum256([]byte("y"))}}); err == nil {
		t.Errorf("two crawlers of one name were taken")
	}
}
