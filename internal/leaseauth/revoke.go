package leaseauth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A revocation list names the leases whose tokens a proxy must refuse although they are
// authentic and unexpired: leases released early, reported and released, or ended by the
// service. An entry names the lease ID (every token of a lease carries it as its subject) and
// the time until which any of its tokens could still pass (the expiry of the lease's last
// token plus Skew); past that the token is refused as expired anyway, so the entry is dropped.
// The list is therefore bounded by the leases released within one maximum TTL, whatever the
// installation's age.
//
// The file form (what `egressd forward-proxy --revocations-file` and `egressd squid-auth
// --revocations-file` read) is text:
//
//	egressd-revocations v1
//	<lease ID> <until, Unix seconds>
//	...
//
// A lease ID is no secret (it is the token's username, in events and status); the list holds
// no token and no key.

// revocationsHeader is the file's first line.
const revocationsHeader = "egressd-revocations v1"

// MaxRevocations bounds a list a parser accepts: far above what one maximum TTL of releases
// holds at any realistic rate, and a bound on the memory a corrupt file can take.
const MaxRevocations = 1 << 20

// Revocations maps revoked lease IDs to the end of their tokens' lives. The zero value is an
// empty list. It is not safe for concurrent writes.
type Revocations struct{ until map[string]time.Time }

// Add revokes subject's tokens until until (the later of two entries wins).
func (r *Revocations) Add(subject string, until time.Time) {
	if r.until == nil {
		r.until = map[string]time.Time{}
	}
	until = until.Truncate(time.Second)
	if old, ok := r.until[subject]; !ok || until.After(old) {
		r.until[subject] = until
	}
}

// Remove drops subject's entry.
func (r *Revocations) Remove(subject string) { delete(r.until, subject) }

// Len is the number of entries.
func (r *Revocations) Len() int { return len(r.until) }

// Prune drops the entries whose tokens have all expired at now.
func (r *Revocations) Prune(now time.Time) {
	maps.DeleteFunc(r.until, func(_ string, u time.Time) bool { return now.After(u) })
}

// Earliest is the earliest end of an entry, false for an empty list.
func (r *Revocations) Earliest() (time.Time, bool) {
	var first time.Time
	for _, u := range r.until {
		if first.IsZero() || u.Before(first) {
			first = u
		}
	}
	return first, !first.IsZero()
}

// Check says ErrRevoked when subject's tokens are revoked at now.
func (r *Revocations) Check(subject string, now time.Time) error {
	if r == nil {
		return nil
	}
	if u, ok := r.until[subject]; ok && !now.After(u) {
		return ErrRevoked
	}
	return nil
}

// Encode writes the file form, entries sorted by lease ID so that equal lists are equal bytes.
func (r *Revocations) Encode() []byte {
	var b bytes.Buffer
	b.WriteString(revocationsHeader + "\n")
	for _, s := range slices.Sorted(maps.Keys(r.until)) {
		b.WriteString(s + " " + strconv.FormatInt(r.until[s].Unix(), 10) + "\n")
	}
	return b.Bytes()
}

// ParseRevocations reads the file form. Its errors name the line, never quote it.
func ParseRevocations(data []byte) (*Revocations, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 512), 4096)
	r := &Revocations{until: map[string]time.Time{}}
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if n == 1 {
			if line != revocationsHeader {
				return nil, fmt.Errorf("revocation list: line 1 is not %q", revocationsHeader)
			}
			continue
		}
		if n-1 > MaxRevocations {
			return nil, fmt.Errorf("revocation list: more than %d entries", MaxRevocations)
		}
		subject, until, ok := strings.Cut(line, " ")
		if !ok || ValidSubject(subject) != nil {
			return nil, fmt.Errorf("revocation list: line %d: want <lease ID> <until>", n)
		}
		if until == "" || len(until) > 12 || (until[0] == '0' && until != "0") || strings.Trim(until, "0123456789") != "" {
			return nil, fmt.Errorf("revocation list: line %d: until is not a decimal Unix time", n)
		}
		secs, err := strconv.ParseInt(until, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("revocation list: line %d: until is not a decimal Unix time", n)
		}
		if _, dup := r.until[subject]; dup {
			return nil, fmt.Errorf("revocation list: line %d: a lease listed twice", n)
		}
		r.until[subject] = time.Unix(secs, 0)
	}
	if err := sc.Err(); err != nil {
		return nil, errors.New("revocation list: a line is too long")
	}
	if n == 0 {
		return nil, errors.New("revocation list: empty (not even its header)")
	}
	return r, nil
}
