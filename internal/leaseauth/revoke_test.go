package leaseauth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRevocations(t *testing.T) {
	var r Revocations
	if err := r.Check(leaseID, t0); err != nil {
		t.Fatalf("an empty list revokes: %v", err)
	}
	r.Add(leaseID, t0.Add(time.Minute))
	r.Add(leaseID, t0) // an earlier entry never shortens a later one
	for _, c := range []struct {
		name    string
		subject string
		at      time.Time
		want    error
	}{
		{"revoked", leaseID, t0, ErrRevoked},
		{"revoked at its end", leaseID, t0.Add(time.Minute), ErrRevoked},
		{"past its end", leaseID, t0.Add(time.Minute + time.Second), nil},
		{"another lease", "p1.1.0123456789abcdef", t0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := r.Check(c.subject, c.at); !errors.Is(err, c.want) || (err == nil) != (c.want == nil) {
				t.Fatalf("Check = %v, want %v", err, c.want)
			}
		})
	}
	back, err := ParseRevocations(r.Encode())
	if err != nil || back.Check(leaseID, t0.Add(time.Minute)) == nil || back.Len() != 1 {
		t.Fatalf("round trip: %v", err)
	}
	r.Prune(t0.Add(time.Minute + time.Second))
	if r.Len() != 0 {
		t.Fatalf("an entry past its end is kept: %d", r.Len())
	}
	var nilList *Revocations
	if nilList.Check(leaseID, t0) != nil {
		t.Fatal("a nil list revokes")
	}
}

func TestParseRevocationsRefuses(t *testing.T) {
	for _, bad := range []string{
		"",
		"egressd-revocations v2\n",
		"egressd-revocations v1\nsecret-lease\n",
		"egressd-revocations v1\nsecret-lease 012\n",
		"egressd-revocations v1\nsecret-lease -1\n",
		"egressd-revocations v1\nsecret lease 1\n",
		"egressd-revocations v1\nsecret-lease 1\nsecret-lease 2\n",
		"egressd-revocations v1\n" + strings.Repeat("s", 5000) + " 1\n",
	} {
		if _, err := ParseRevocations([]byte(bad)); err == nil {
			t.Errorf("ParseRevocations(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error quotes the input: %v", err)
		}
	}
	if r, err := ParseRevocations([]byte("egressd-revocations v1\n")); err != nil || r.Len() != 0 {
		t.Fatalf("an empty list: %v", err)
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{nil: "", ErrRevoked: "revoked", ErrInstance: "instance", ErrKeyID: "key",
		ErrExpired: "expired", ErrSignature: "signature", ErrMalformed: "malformed", errors.New("x"): "other"} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}
