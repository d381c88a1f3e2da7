package leaseauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// A Ring is the installation's lease masters during and between rotations (decision 88): the
// current master, which signs; while a rotation spreads, the next one, which proxies are
// given beside the current one but which signs nothing yet; and once the next has become
// current, the previous one, which proxies still accept until every token it signed has
// expired. One KV value holds it (egress_locks.lease-master), so each step of a rotation is
// one compare-and-set that either happened or did not: a crash between steps leaves a ring
// the next step continues from.
//
// Stored form: a ring with neither next nor previous is the bare master (Master.Encode),
// which is what egressd before rotations wrote and reads; a rotating ring is JSON:
//
//	{"v":1,"current":"<master>","next":"<master>","previous":"<master>",
//	 "since":"<RFC 3339>","retireAfter":"<RFC 3339>"}
type Ring struct {
	Current  Master
	Next     Master    // spreading: accepted, not signing
	Previous Master    // retiring: accepted until RetireAfter, not signing
	Since    time.Time // when the current phase began
	// RetireAfter is, while retiring, the moment past which no token the previous master
	// signed can still pass: the switch plus the longest lease TTL plus Skew and margin.
	RetireAfter time.Time
}

// Rotation phases, as status and events name them.
const (
	PhaseSteady    = "steady"    // one master
	PhaseSpreading = "spreading" // the next master is being delivered to every proxy
	PhaseRetiring  = "retiring"  // the new master signs; the previous one awaits its tokens' end
)

// Phase is the ring's rotation phase.
func (r Ring) Phase() string {
	switch {
	case !r.Next.IsZero():
		return PhaseSpreading
	case !r.Previous.IsZero():
		return PhaseRetiring
	}
	return PhaseSteady
}

// Signing is the master new tokens are signed with: the current one.
func (r Ring) Signing() Master { return r.Current }

// Accepted are the masters a proxy must hold keys of: the current one first, then the next
// or the previous one while a rotation runs.
func (r Ring) Accepted() []Master {
	var out []Master
	for _, m := range []Master{r.Current, r.Next, r.Previous} {
		if !m.IsZero() {
			out = append(out, m)
		}
	}
	return out
}

// IDs are the IDs of the accepted masters, in Accepted's order.
func (r Ring) IDs() []string {
	var ids []string
	for _, m := range r.Accepted() {
		ids = append(ids, m.ID())
	}
	return ids
}

// Begin starts a rotation: next becomes the master that spreads. It fails unless r is steady.
func (r Ring) Begin(next Master, now time.Time) (Ring, error) {
	if r.Phase() != PhaseSteady {
		return r, fmt.Errorf("lease master: a rotation is already %s", r.Phase())
	}
	if r.Current.IsZero() || next.IsZero() {
		return r, errors.New("lease master: no master to rotate")
	}
	return Ring{Current: r.Current, Next: next, Since: now.UTC()}, nil
}

// Switch has the next master sign from now on; the previous one retires after maxTTL (the
// longest token a leaser hands out) plus Skew and margin (how late a leaser may still sign
// with it: its re-read of the ring).
func (r Ring) Switch(now time.Time, maxTTL, margin time.Duration) (Ring, error) {
	if r.Phase() != PhaseSpreading {
		return r, fmt.Errorf("lease master: nothing to switch to (the rotation is %s)", r.Phase())
	}
	now = now.UTC()
	return Ring{Current: r.Next, Previous: r.Current, Since: now, RetireAfter: now.Add(maxTTL + Skew + margin)}, nil
}

// Retire drops the previous master: its tokens are refused from then on.
func (r Ring) Retire(now time.Time) (Ring, error) {
	if r.Phase() != PhaseRetiring {
		return r, fmt.Errorf("lease master: nothing to retire (the rotation is %s)", r.Phase())
	}
	return Ring{Current: r.Current, Since: now.UTC()}, nil
}

type ringWire struct {
	V           int       `json:"v"`
	Current     string    `json:"current"`
	Next        string    `json:"next,omitempty"`
	Previous    string    `json:"previous,omitempty"`
	Since       time.Time `json:"since"`
	RetireAfter time.Time `json:"retireAfter,omitzero"`
}

// Encode is the stored form: the bare master when steady, JSON while rotating.
func (r Ring) Encode() []byte {
	if r.Phase() == PhaseSteady {
		return r.Current.Encode()
	}
	enc := func(m Master) string {
		if m.IsZero() {
			return ""
		}
		return string(m.Encode())
	}
	b, _ := json.Marshal(ringWire{V: 1, Current: enc(r.Current), Next: enc(r.Next), Previous: enc(r.Previous),
		Since: r.Since.UTC(), RetireAfter: r.RetireAfter.UTC()})
	return b
}

// ParseRing reads the stored form. Its errors never quote the input.
func ParseRing(text []byte) (Ring, error) {
	s := strings.TrimSpace(string(text))
	if !strings.HasPrefix(s, "{") {
		m, err := ParseMaster([]byte(s))
		return Ring{Current: m}, err
	}
	var w ringWire
	if err := json.Unmarshal([]byte(s), &w); err != nil || w.V != 1 {
		return Ring{}, errors.New("lease master: not a v1 key ring")
	}
	var r Ring
	var err error
	if r.Current, err = ParseMaster([]byte(w.Current)); err != nil {
		return Ring{}, fmt.Errorf("lease master: current: %w", err)
	}
	for _, f := range []struct {
		text string
		dst  *Master
		name string
	}{{w.Next, &r.Next, "next"}, {w.Previous, &r.Previous, "previous"}} {
		if f.text == "" {
			continue
		}
		if *f.dst, err = ParseMaster([]byte(f.text)); err != nil {
			return Ring{}, fmt.Errorf("lease master: %s: %w", f.name, err)
		}
	}
	if !r.Next.IsZero() && !r.Previous.IsZero() {
		return Ring{}, errors.New("lease master: a key ring holds a next or a previous master, not both")
	}
	r.Since, r.RetireAfter = w.Since, w.RetireAfter
	return r, nil
}

// String says the phase and the IDs, never a secret.
func (r Ring) String() string {
	return r.Phase() + " " + strings.Join(r.IDs(), ",")
}

// Source is where the roles take masters from: a fixed Master, or a Live ring a re-reader
// keeps up to date. Signers use Signing; the provisioner delivers keys of every Accepted.
type Source interface {
	Signing() Master
	Accepted() []Master
}

// Signing is the master itself.
func (m Master) Signing() Master { return m }

// Accepted is the master itself, none for a zero master.
func (m Master) Accepted() []Master {
	if m.IsZero() {
		return nil
	}
	return []Master{m}
}

// SigningOf is s's signing master, zero for no source.
func SigningOf(s Source) Master {
	if s == nil {
		return Master{}
	}
	return s.Signing()
}

// InstanceKeys are the keys of a proxy instance under every master src accepts (during a
// rotation, the current one and the next or previous one), none without a source: what the
// proxy's key file holds.
func InstanceKeys(src Source, proxy, instance string) []Key {
	if src == nil {
		return nil
	}
	var keys []Key
	for _, m := range src.Accepted() {
		keys = append(keys, m.InstanceKey(proxy, instance))
	}
	return keys
}

// Live is a Ring shared by the goroutines that sign and the one that re-reads it. The zero
// value holds no master.
type Live struct{ p atomic.Pointer[Ring] }

// NewLive holds r.
func NewLive(r Ring) *Live {
	l := &Live{}
	l.Set(r)
	return l
}

// Set replaces the ring.
func (l *Live) Set(r Ring) { l.p.Store(&r) }

// Ring is the ring as last set; none for a nil Live.
func (l *Live) Ring() Ring {
	if l == nil {
		return Ring{}
	}
	if r := l.p.Load(); r != nil {
		return *r
	}
	return Ring{}
}

// Signing is the current master.
func (l *Live) Signing() Master { return l.Ring().Signing() }

// Accepted are the masters proxies must hold.
func (l *Live) Accepted() []Master { return l.Ring().Accepted() }
