package leaseauth

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var second = mustMaster("ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8")

// A rotation's three steps, each from the one phase it belongs to, through the stored form:
// which masters sign, which a proxy must hold, and when the previous one may retire.
func TestRingRotation(t *testing.T) {
	steady := Ring{Current: master}
	spreading, err := steady.Begin(second, t0)
	if err != nil {
		t.Fatal(err)
	}
	retiring, err := spreading.Switch(t0.Add(time.Minute), time.Hour, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	done, err := retiring.Retire(t0.Add(2 * time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		r        Ring
		phase    string
		signs    Master
		accepted []string
	}{
		{"steady", steady, PhaseSteady, master, []string{master.ID()}},
		{"spreading", spreading, PhaseSpreading, master, []string{master.ID(), second.ID()}},
		{"retiring", retiring, PhaseRetiring, second, []string{second.ID(), master.ID()}},
		{"retired", done, PhaseSteady, second, []string{second.ID()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			back, err := ParseRing(c.r.Encode())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []Ring{c.r, back} {
				if r.Phase() != c.phase || r.Signing().ID() != c.signs.ID() || strings.Join(r.IDs(), ",") != strings.Join(c.accepted, ",") {
					t.Errorf("phase %s, signs %s, accepts %v; want %s, %s, %v", r.Phase(), r.Signing().ID(), r.IDs(), c.phase, c.signs.ID(), c.accepted)
				}
			}
			if c.phase == PhaseSteady && string(c.r.Encode()) != string(c.r.Current.Encode()) {
				t.Error("a steady ring is not stored as the bare master (what egressd before rotations reads)")
			}
		})
	}
	if want := t0.Add(time.Minute + time.Hour + Skew + 10*time.Second); !retiring.RetireAfter.Equal(want) {
		t.Errorf("retire after %v, want %v", retiring.RetireAfter, want)
	}
	for name, err := range map[string]error{
		"begin while spreading":  func() error { _, err := spreading.Begin(NewMaster(), t0); return err }(),
		"switch while steady":    func() error { _, err := steady.Switch(t0, time.Hour, 0); return err }(),
		"retire while spreading": func() error { _, err := spreading.Retire(t0); return err }(),
		"retire while steady":    func() error { _, err := steady.Retire(t0); return err }(),
		"begin without master":   func() error { _, err := Ring{}.Begin(second, t0); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A stored ring that is not one is refused, and the error quotes none of it.
func TestParseRingRefuses(t *testing.T) {
	secret := string(master.Encode())
	for _, text := range []string{
		"", "{}", `{"v":2,"current":"` + secret + `"}`, `{"v":1,"current":"x` + secret + `"}`,
		`{"v":1,"current":"` + secret + `","next":"` + secret + `x"}`,
		`{"v":1,"current":"` + secret + `","next":"` + string(second.Encode()) + `","previous":"` + string(second.Encode()) + `"}`,
		secret + "x",
	} {
		_, err := ParseRing([]byte(text))
		if err == nil {
			t.Errorf("%q parsed", text)
			continue
		}
		if strings.Contains(err.Error(), secret[:10]) {
			t.Errorf("the error quotes the master: %v", err)
		}
	}
}

// A key set checks each token with the key its master ID names: during a rotation a proxy
// passes the tokens of both masters, and refuses those of a master it does not hold (key),
// of another instance, or forged.
func TestKeySetVerify(t *testing.T) {
	third := NewMaster()
	both, err := ParseKeyLines(FileLines(master.InstanceKey("p1", "i1"), second.InstanceKey("p1", "i1")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(both.IDs(), ",") != master.ID()+","+second.ID() || both.Proxy() != "p1" || both.Instance() != "i1" {
		t.Fatalf("ids %v proxy %q instance %q", both.IDs(), both.Proxy(), both.Instance())
	}
	exp := t0.Add(time.Minute)
	sign := func(m Master, instance string) (string, string) {
		return m.InstanceKey("p1", instance).Sign(leaseID, exp)
	}
	for _, c := range []struct {
		name       string
		user, pass string
		want       error
	}{
		{"current master", leaseID, func() string { _, p := sign(master, "i1"); return p }(), nil},
		{"next master", leaseID, func() string { _, p := sign(second, "i1"); return p }(), nil},
		{"a master it does not hold", leaseID, func() string { _, p := sign(third, "i1"); return p }(), ErrKeyID},
		{"another instance", leaseID, func() string { _, p := sign(second, "i2"); return p }(), ErrInstance},
		{"forged", leaseID, func() string { _, p := sign(second, "i1"); return p[:len(p)-2] + "AA" }(), ErrSignature},
		{"bad subject", "", func() string { _, p := sign(third, "i1"); return p }(), ErrMalformed},
		{"malformed", leaseID, "v2.nope", ErrMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := both.VerifyToken(c.user, c.pass, t0); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("got %v, want %v", err, c.want)
			}
		})
	}
	if _, err := both.VerifyToken(leaseID, func() string { _, p := sign(second, "i1"); return p }(), exp.Add(Skew+time.Second)); !errors.Is(err, ErrExpired) {
		t.Errorf("an expired token of the second master: %v", err)
	}
}

// Key files that are not one proxy instance's keys, one per master, are refused.
func TestParseKeyLinesRefuses(t *testing.T) {
	k1, k2 := master.InstanceKey("p1", "i1"), second.InstanceKey("p1", "i1")
	for name, text := range map[string]string{
		"empty":              "",
		"two of one master":  FileLines(k1, k1),
		"two proxies":        FileLines(k1, second.InstanceKey("p2", "i1")),
		"two instances":      FileLines(k1, second.InstanceKey("p1", "i2")),
		"too many":           FileLines(k1, k2, NewMaster().InstanceKey("p1", "i1"), NewMaster().InstanceKey("p1", "i1"), NewMaster().InstanceKey("p1", "i1")),
		"a password line":    k1.FileLine() + "user:sha256:00:00\n",
		"a blank line among": k1.FileLine() + "\n" + k2.FileLine(),
	} {
		if _, err := ParseKeyLines(text); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// No form of a ring, a live ring or a key set prints a secret.
func TestRingNeverPrints(t *testing.T) {
	r, _ := Ring{Current: master}.Begin(second, t0)
	set, _ := NewKeySet(master.InstanceKey("p1", "i1"), second.InstanceKey("p1", "i1"))
	secrets := []string{string(master.Encode()), string(second.Encode())}
	for _, k := range []Key{master.InstanceKey("p1", "i1"), second.InstanceKey("p1", "i1")} {
		line := k.FileLine()
		secrets = append(secrets, strings.TrimSpace(line[strings.LastIndex(line, ":")+1:]))
	}
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, nil))
	log.Info("x", "ring", r, "set", set, "live", NewLive(r))
	fmt.Fprintf(&b, "%v %+v %#v %s %v %+v %#v", r, r, r, r, set, set, set)
	for _, s := range secrets {
		if strings.Contains(b.String(), s) {
			t.Fatalf("a secret printed: %s", b.String())
		}
	}
}
