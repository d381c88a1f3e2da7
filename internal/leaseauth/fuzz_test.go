package leaseauth

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// FuzzVerify: any credential is either accepted, and then it is exactly what Sign writes for
// its subject and expiry, or refused with one of the three errors; nothing panics.
func FuzzVerify(f *testing.F) {
	k := master.InstanceKey("p1", "i1")
	user, pass := k.Sign(leaseID, t0.Add(time.Minute))
	sig := pass[len(pass)-43:]
	f.Add(user, pass)
	f.Add(user, pass+"x")
	f.Add("", "")
	f.Add("a", "v2.0.")
	f.Add("a", "v2.k..1.AAAA")
	f.Add("p1.0.x", "v2."+master.ID()+".i1.-1."+sig)
	f.Add(user, "v2."+master.ID()+".i1.99999999999."+sig)
	f.Add(user, "v2."+master.ID()+".i2.1."+sig)
	f.Fuzz(func(t *testing.T, user, pass string) {
		err := k.Verify(user, pass, t0)
		if err != nil {
			if Reason(err) == "other" {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		tok, err := ParseToken(pass)
		if err != nil {
			t.Fatalf("accepted but does not parse: %v", err)
		}
		if tok.KeyID != k.KeyID() || tok.Instance != k.Instance() {
			t.Fatalf("accepted a token of master %q, instance %q", tok.KeyID, tok.Instance)
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
	f.Add(master.InstanceKey("p1", "i-1").FileLine())
	f.Add("p1:lease:k::" + strings.Repeat("A", 43))
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

// FuzzParseRevocations: a list either parses and writes back to what parses the same, or is
// refused without quoting its input; nothing panics.
func FuzzParseRevocations(f *testing.F) {
	var r Revocations
	r.Add(leaseID, t0)
	r.Add("p2.1.ffff", t0.Add(time.Hour))
	f.Add(r.Encode())
	f.Add([]byte(""))
	f.Add([]byte("egressd-revocations v1\n"))
	f.Add([]byte("egressd-revocations v1\na 1\na 2\n"))
	f.Add([]byte("egressd-revocations v1\na 01\n"))
	f.Add([]byte("egressd-revocations v1\na\tb 1\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseRevocations(data)
		if err != nil {
			if len(data) > 40 && strings.Contains(err.Error(), string(data[23:])) {
				t.Fatalf("error quotes the input: %v", err)
			}
			return
		}
		back, err := ParseRevocations(got.Encode())
		if err != nil || !bytes.Equal(back.Encode(), got.Encode()) {
			t.Fatalf("a parsed list does not round-trip: %v", err)
		}
	})
}

// FuzzParseRing: any stored ring either parses, and then stores back to what parses to the
// same ring, or is refused; nothing panics.
func FuzzParseRing(f *testing.F) {
	r, _ := Ring{Current: master}.Begin(other, t0)
	s, _ := r.Switch(t0, time.Hour, 0)
	for _, seed := range [][]byte{master.Encode(), r.Encode(), s.Encode(), []byte("{}"), []byte(`{"v":1}`), nil} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRing(data)
		if err != nil {
			return
		}
		back, err := ParseRing(r.Encode())
		if err != nil {
			t.Fatalf("a parsed ring does not parse back: %v", err)
		}
		if back.Phase() != r.Phase() || strings.Join(back.IDs(), ",") != strings.Join(r.IDs(), ",") {
			t.Fatalf("ring %s parses back as %s", r, back)
		}
	})
}

// FuzzParseKeyLines: any key file either parses into keys of one instance, one per master,
// that write back as the same lines, or is refused; nothing panics.
func FuzzParseKeyLines(f *testing.F) {
	f.Add(FileLines(master.InstanceKey("p1", "i1"), other.InstanceKey("p1", "i1")))
	f.Add(master.InstanceKey("p1", "").FileLine())
	f.Add("p1:lease:x:i:AAAA\n\n")
	f.Fuzz(func(t *testing.T, text string) {
		set, err := ParseKeyLines(text)
		if err != nil {
			return
		}
		again, err := ParseKeyLines(set.FileLines())
		if err != nil || strings.Join(again.IDs(), ",") != strings.Join(set.IDs(), ",") || again.Proxy() != set.Proxy() {
			t.Fatalf("a parsed key file does not write back: %v", err)
		}
	})
}
