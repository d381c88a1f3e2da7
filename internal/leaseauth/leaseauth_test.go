package leaseauth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"
)

var (
	t0      = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	master  = mustMaster("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8")
	other   = mustMaster("Hx4dHBsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA")
	leaseID = "p1.0.0123456789abcdef"
)

func mustMaster(s string) Master {
	m, err := ParseMaster([]byte(s))
	if err != nil {
		panic(err)
	}
	return m
}

func TestVerify(t *testing.T) {
	k := master.InstanceKey("p1", "i1")
	user, pass := k.Sign(leaseID, t0.Add(time.Minute))
	f := strings.Split(pass, ".")
	kid, exp, sig := f[1], f[3], f[4]
	pre := "v2." + kid + ".i1."
	flip := []byte(sig)
	flip[3] ^= 1 // still base64url, another signature
	if flip[3] == sig[3] {
		t.Fatal("flip did nothing")
	}
	otherUser, otherPass := master.InstanceKey("p2", "i1").Sign(leaseID, t0.Add(time.Minute))
	wrongUser, wrongPass := other.InstanceKey("p1", "i1").Sign(leaseID, t0.Add(time.Minute))
	_, rebuiltPass := master.InstanceKey("p1", "i2").Sign(leaseID, t0.Add(time.Minute))
	// The same master ID and instance on another master's key: only the signature tells.
	forged := Key{kid: kid, proxy: "p1", instance: "i1", b: other.InstanceKey("p1", "i1").b}
	_, forgedPass := forged.Sign(leaseID, t0.Add(time.Minute))
	for _, c := range []struct {
		name       string
		key        Key
		user, pass string
		now        time.Time
		want       error
	}{
		{"valid", k, user, pass, t0, nil},
		{"valid at expiry", k, user, pass, t0.Add(time.Minute), nil},
		{"valid within the skew", k, user, pass, t0.Add(time.Minute + Skew), nil},
		{"expired past the skew", k, user, pass, t0.Add(time.Minute + Skew + time.Second), ErrExpired},
		{"altered subject", k, "p1.0.0123456789abcdee", pass, t0, ErrSignature},
		{"altered expiry", k, user, pre + fmt.Sprint(t0.Add(time.Hour).Unix()) + "." + sig, t0, ErrSignature},
		{"altered signature", k, user, pre + exp + "." + string(flip), t0, ErrSignature},
		{"another proxy's token", k, otherUser, otherPass, t0, ErrSignature},
		{"another master's token", k, wrongUser, wrongPass, t0, ErrKeyID},
		{"another master under this master's ID", k, user, forgedPass, t0, ErrSignature},
		{"a rebuilt instance's token", k, user, rebuiltPass, t0, ErrInstance},
		{"altered instance", k, user, "v2." + kid + ".i2." + exp + "." + sig, t0, ErrInstance},
		{"zero key", Key{proxy: "p1"}, user, pass, t0, ErrSignature},
		{"zero master signs nothing valid", k, user, func() string { _, p := (Master{}).InstanceKey("p1", "i1").Sign(leaseID, t0); return p }(), t0, ErrKeyID},
		{"empty", k, "", "", t0, ErrMalformed},
		{"bad subject", k, "p1 0", pass, t0, ErrMalformed},
		{"long subject", k, strings.Repeat("a", MaxSubject+1), pass, t0, ErrMalformed},
		{"no version", k, user, strings.TrimPrefix(pass, "v2."), t0, ErrMalformed},
		{"old version", k, user, "v1." + exp + "." + sig, t0, ErrMalformed},
		{"no signature", k, user, pre + exp, t0, ErrMalformed},
		{"no master ID", k, user, "v2..i1." + exp + "." + sig, t0, ErrMalformed},
		{"bad instance", k, user, "v2." + kid + ".i:1." + exp + "." + sig, t0, ErrMalformed},
		{"long instance", k, user, "v2." + kid + "." + strings.Repeat("i", MaxInstance+1) + "." + exp + "." + sig, t0, ErrMalformed},
		{"signed expiry", k, user, pre + "+" + exp + "." + sig, t0, ErrMalformed},
		{"leading zero", k, user, pre + "0" + exp + "." + sig, t0, ErrMalformed},
		{"huge expiry", k, user, pre + "9999999999999." + sig, t0, ErrMalformed},
		{"padded signature", k, user, pass + "=", t0, ErrMalformed},
		{"short signature", k, user, pre + exp + "." + sig[:40], t0, ErrMalformed},
		{"std base64", k, user, pre + exp + "." + strings.NewReplacer("-", "+", "_", "/").Replace(sig) + "+", t0, ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.key.Verify(c.user, c.pass, c.now)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
			if err != nil && strings.Contains(err.Error(), sig) {
				t.Fatalf("error quotes the token: %v", err)
			}
		})
	}
}

// The credential goes into a URL as it is: nothing to escape.
func TestTokenIsURLSafe(t *testing.T) {
	user, pass := NewMaster().ProxyKey("p-1").Sign("p-1.12.0123456789abcdef", t0)
	u := url.URL{Scheme: "http", Host: "127.0.0.1:3128", User: url.UserPassword(user, pass)}
	if want := "http://" + user + ":" + pass + "@127.0.0.1:3128"; u.String() != want {
		t.Fatalf("URL %s, want %s", u.String(), want)
	}
}

func TestRenewalTokensAreIndependent(t *testing.T) {
	k := master.ProxyKey("p1")
	_, first := k.Sign(leaseID, t0.Add(time.Minute))
	_, second := k.Sign(leaseID, t0.Add(2*time.Minute))
	if first == second {
		t.Fatal("a renewal's token equals the grant's")
	}
	at := t0.Add(time.Minute + Skew + time.Second)
	if err := k.Verify(leaseID, first, at); !errors.Is(err, ErrExpired) {
		t.Fatalf("first token after its expiry: %v", err)
	}
	if err := k.Verify(leaseID, second, at); err != nil {
		t.Fatalf("second token before its expiry: %v", err)
	}
}

func TestFileLine(t *testing.T) {
	k := master.ProxyKey("p1")
	line := k.FileLine()
	if !IsFileLine(line) {
		t.Fatalf("IsFileLine(%q) = false", line)
	}
	back, err := ParseFileLine(line)
	if err != nil {
		t.Fatal(err)
	}
	user, pass := k.Sign(leaseID, t0)
	if back.Proxy() != "p1" || back.Verify(user, pass, t0) != nil {
		t.Fatal("the key read back does not verify its own tokens")
	}
	if back.Instance() != "" || back.KeyID() != master.ID() {
		t.Fatalf("read back instance %q, master ID %q", back.Instance(), back.KeyID())
	}
	kid, rest := master.ID(), strings.TrimSpace(line[len("p1:lease:"+master.ID()+"::"):])
	for _, bad := range []string{"", "p1:lease", "p1:sha256:00", "p1:lease:AAAA", "p1:lease:" + kid + "::AAAA",
		"p 1:lease:" + kid + "::" + rest, "p1:lease::i:" + rest, "p1:lease:" + kid + ":i.1:" + rest,
		"p1:lease:" + rest, // a v1 line
		"p1:lease:" + kid + "::" + rest + "\nx"} {
		if _, err := ParseFileLine(bad); err == nil {
			t.Errorf("ParseFileLine(%q) accepted", bad)
		} else if strings.Contains(err.Error(), rest[:20]) {
			t.Errorf("error quotes the key: %v", err)
		}
	}
	if IsFileLine("u:sha256:00:11") {
		t.Error("a password line taken for a key line")
	}
}

func TestParseMaster(t *testing.T) {
	m := NewMaster()
	back, err := ParseMaster(append(m.Encode(), '\n'))
	if err != nil || !bytes.Equal(back.b, m.b) {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "AAAA", string(m.Encode()) + "AA", "!!!"} {
		if _, err := ParseMaster([]byte(bad)); err == nil {
			t.Errorf("ParseMaster(%q) accepted", bad)
		}
	}
	if a, b := NewMaster(), NewMaster(); a.ProxyKey("p").FileLine() == b.ProxyKey("p").FileLine() {
		t.Error("two masters derive the same key")
	}
}

// Neither a master nor a key prints, whatever the formatting path.
func TestSecretsNeverPrint(t *testing.T) {
	m := NewMaster()
	k := m.ProxyKey("p1")
	secrets := []string{string(m.Encode()), strings.Split(strings.TrimSpace(k.FileLine()), ":")[4]}
	var logged bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logged, nil))
	log.Info("x", "master", m, "key", k)
	js, _ := json.Marshal(struct {
		M Master
		K Key
	}{m, k})
	out := fmt.Sprintf("%v %+v %#v %s %q %x", m, m, m, m, m, m) + fmt.Sprintf("%v %+v %#v %s %q %x", k, k, k, k, k, k) +
		fmt.Sprint(m, k) + string(js) + logged.String()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("a secret printed: %s", out)
		}
	}
	if !strings.Contains(out, "[redacted]") {
		t.Fatalf("no redaction in %s", out)
	}
}

func BenchmarkVerify(b *testing.B) {
	k := master.ProxyKey("p1")
	user, pass := k.Sign(leaseID, t0.Add(time.Minute))
	for b.Loop() {
		if k.Verify(user, pass, t0) != nil {
			b.Fatal("rejected")
		}
	}
}
