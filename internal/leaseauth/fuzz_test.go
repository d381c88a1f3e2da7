package leaseauth

import (
	"errors"
	"testing"
	"time"
)

// FuzzVerify: any credential is either accepted, and then it is exactly what Sign writes for
// its subject and expiry, or refused with one of the three errors; nothing panics.
func FuzzVerify(f *testing.F) {
	k := master.ProxyKey("p1")
	user, pass := k.Sign(leaseID, t0.Add(time.Minute))
	f.Add(user, pass)
	f.Add(user, pass+"x")
	f.Add("", "")
	f.Add("a", "v1.0.")
	f.Add("a", "v1.1.AAAA")
	f.Add("p1.0.x", "v1.-1."+pass[len(pass)-43:])
	f.Add(user, "v1.99999999999."+pass[len(pass)-43:])
	f.Fuzz(func(t *testing.T, user, pass string) {
		err := k.Verify(user, pass, t0)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrSignature) && !errors.Is(err, ErrExpired) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		tok, err := ParseToken(pass)
		if err != nil {
			t.Fatalf("accepted but does not parse: %v", err)
		}
		if _, again := k.Sign(user, tok.Expires); again != pass {
			t.Fatalf("accepted %q, which Sign writes as %q", pass, again)
		}
	})
}

// FuzzParseFileLine: a key line either parses and writes back the same, or is refused.
func FuzzParseFileLine(f *testing.F) {
	f.Add(master.ProxyKey("p1").FileLine())
	f.Add("p1:lease:")
	f.Add("u:sha256:00:00")
	f.Fuzz(func(t *testing.T, line string) {
		k, err := ParseFileLine(line)
		if err != nil {
			return
		}
		back, err := ParseFileLine(k.FileLine())
		if err != nil || back.FileLine() != k.FileLine() {
			t.Fatalf("a parsed line does not round-trip: %v", err)
		}
	})
}
