package schemas

import "fmt"

// Defaults and bounds of recycle.quarantine (docs/pools.md#quarantine, decision 96).
const (
	// DefaultQuarantineSeconds is how long a burned address stays in quarantine: a day, about
	// as long as sites commonly remember a blocked address.
	DefaultQuarantineSeconds = 86400
	MinQuarantineSeconds     = 60
	MaxQuarantineSeconds     = 30 * 86400
	// The neighbourhood quarantined with a burned address: the address alone by default.
	DefaultQuarantineIPv4Prefix = 32
	DefaultQuarantineIPv6Prefix = 128
	// A neighbourhood no wider than an IPv4 /8 or an IPv6 /32: wider would quarantine a
	// provider's whole range, and a local provider's every address.
	MinQuarantineIPv4Prefix = 8
	MinQuarantineIPv6Prefix = 32
	// DefaultQuarantineReplacements bounds the replacements in a row made for a member whose
	// egress is in quarantine: a provider that always hands out the same egress (a NAT) cannot
	// be helped, and must not be churned without end.
	DefaultQuarantineReplacements = 3
	MaxQuarantineReplacements     = 10
)

// Quarantine is recycle.quarantine: a burned member's egress address (with its neighbourhood)
// is remembered for Seconds; the local provider hands out none of it, and a member that
// replaced a burned one and still leaves from it is replaced again, at most MaxReplacements
// times in a row. Seconds 0 turns quarantine off.
type Quarantine struct {
	Seconds         *int `json:"seconds,omitempty"`
	IPv4Prefix      int  `json:"ipv4Prefix,omitempty"`
	IPv6Prefix      int  `json:"ipv6Prefix,omitempty"`
	MaxReplacements *int `json:"maxReplacements,omitempty"`
}

// On says whether burned addresses go into quarantine.
func (q *Quarantine) On() bool { return q != nil && q.Seconds != nil && *q.Seconds > 0 }

func (q *Quarantine) applyDefaults() {
	if q.Seconds == nil {
		n := DefaultQuarantineSeconds
		q.Seconds = &n
	}
	if q.IPv4Prefix == 0 {
		q.IPv4Prefix = DefaultQuarantineIPv4Prefix
	}
	if q.IPv6Prefix == 0 {
		q.IPv6Prefix = DefaultQuarantineIPv6Prefix
	}
	if q.MaxReplacements == nil {
		n := DefaultQuarantineReplacements
		q.MaxReplacements = &n
	}
}

// problems are q's invalid fields, each with what it must be; q has its defaults.
func (q *Quarantine) problems(bad func(field, format string, args ...any)) {
	const f = "recycle.quarantine."
	if s := q.Seconds; s != nil && *s != 0 && (*s < MinQuarantineSeconds || *s > MaxQuarantineSeconds) {
		bad(f+"seconds", "must be 0 (off) or between %d and %d, got %d", MinQuarantineSeconds, MaxQuarantineSeconds, *s)
	}
	if q.IPv4Prefix < MinQuarantineIPv4Prefix || q.IPv4Prefix > 32 {
		bad(f+"ipv4Prefix", "must be between %d and 32, got %d", MinQuarantineIPv4Prefix, q.IPv4Prefix)
	}
	if q.IPv6Prefix < MinQuarantineIPv6Prefix || q.IPv6Prefix > 128 {
		bad(f+"ipv6Prefix", "must be between %d and 128, got %d", MinQuarantineIPv6Prefix, q.IPv6Prefix)
	}
	if m := q.MaxReplacements; m != nil && (*m < 0 || *m > MaxQuarantineReplacements) {
		bad(f+"maxReplacements", "must be between 0 and %d, got %d", MaxQuarantineReplacements, *m)
	}
}

// String is the quarantine in a few words, for events and status.
func (q *Quarantine) String() string {
	if !q.On() {
		return "off"
	}
	return fmt.Sprintf("%ds, /%d and /%d", *q.Seconds, q.IPv4Prefix, q.IPv6Prefix)
}
