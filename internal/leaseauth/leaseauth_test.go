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
	k := master.ProxyKey("p1")
	user, pass := k.Sign(leaseID, t0.Add(time.Minute))
	exp, sig, _ := strings.Cut(strings.TrimPrefix(pass, "v1."), ".")
	flip := []byte(sig)
	flip[3] ^= 1 // still base64url, another signature
	if flip[3] == sig[3] {
		t.Fatal("flip did nothing")
	}
	otherUser, otherPass := master.ProxyKey("p2").Sign(leaseID, t0.Add(time.Minute))
	wrongUser, wrongPass := other.ProxyKey("p1").Sign(leaseID, t0.Add(time.Minute))
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
		{"altered expiry", k, user, "v1." + fmt.Sprint(t0.Add(time.Hour).Unix()) + "." + sig, t0, ErrSignature},
		{"altered signature", k, user, "v1." + exp + "." + string(flip), t0, ErrSignature},
		{"another proxy's token", k, otherUser, otherPass, t0, ErrSignature},
		{"another master's token", k, wrongUser, wrongPass, t0, ErrSignature},
		{"zero key", Key{proxy: "p1"}, user, pass, t0, ErrSignature},
		{"zero master signs nothing valid", k, user, func() string { _, p := (Master{}).ProxyKey("p1").Sign(leaseID, t0); return p }(), t0, ErrSignature},
		{"empty", k, "", "", t0, ErrMalformed},
		{"bad subject", k, "p1 0", pass, t0, ErrMalformed},
		{"long subject", k, strings.Repeat("a", MaxSubject+1), pass, t0, ErrMalformed},
		{"no version", k, user, strings.TrimPrefix(pass, "v1."), t0, ErrMalformed},
		{"other version", k, user, "v2." + exp + "." + sig, t0, ErrMalformed},
		{"no signature", k, user, "v1." + exp, t0, ErrMalformed},
		{"signed expiry", k, user, "v1.+" + exp + "." + sig, t0, ErrMalformed},
		{"leading zero", k, user, "v1.0" + exp + "." + sig, t0, ErrMalformed},
		{"huge expiry", k, user, "v1.9999999999999." + sig, t0, ErrMalformed},
		{"padded signature", k, user, pass + "=", t0, ErrMalformed},
		{"short signature", k, user, "v1." + exp + "." + sig[:40], t0, ErrMalformed},
		{"std base64", k, user, "v1." + exp + "." + strings.NewReplacer("-", "+", "_", "/").Replace(sig) + "+", t0, ErrMalformed},
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
	for _, bad := range []string{"", "p1:lease", "p1:sha256:00", "p1:lease:AAAA", "p 1:lease:" + line[len("p1:lease:"):],
		"p1:lease:" + strings.TrimSpace(line[len("p1:lease:"):]) + "\nx"} {
		if _, err := ParseFileLine(bad); err == nil {
			t.Errorf("ParseFileLine(%q) accepted", bad)
		} else if len(bad) > 20 && strings.Contains(err.Error(), bad[9:30]) {
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
	secrets := []string{string(m.Encode()), strings.Split(strings.TrimSpace(k.FileLine()), ":")[2]}
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
