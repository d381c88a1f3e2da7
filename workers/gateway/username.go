package gateway

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
)

// Route is what a crawler's proxy username asks for (docs/gateway.md#the-username): which
// proxies may carry its traffic and how they are chosen. The zero Route is any proxy, balanced,
// no session.
type Route struct {
	Selector     map[string]string // attribute pairs, "pool" among them
	Session      string            // the session key, "" for rotating
	SessionTTL   time.Duration     // how long the session is bound to its proxy
	StickyMode   events.StickyMode // soft (default) or strict
	Strategy     events.Strategy   // "" is balanced
	MinAnonymity events.Anonymity  // "" is any
}

// Pool is the pool the route asks for, "" for none (the metrics' label).
func (r Route) Pool() string { return r.Selector["pool"] }

// Username limits: a session key becomes a sticky key of at most 256 bytes with the holder
// in front, and a selector has at most 32 pairs (docs/leases.md).
const (
	maxUsername       = 1024
	maxSelectorPairs  = 32
	maxSessionKey     = 128
	DefaultSessionTTL = 10 * time.Minute
	maxSessionTTL     = 24 * time.Hour
)

// UsernameError is a username the gateway cannot route: Key names the part at fault.
type UsernameError struct {
	Key string
	Msg string
}

func (e *UsernameError) Error() string { return fmt.Sprintf("proxy username: %q: %s", e.Key, e.Msg) }

// Reserved keys of the username; every other key must be one of the attribute keys the
// gateway was configured with.
const (
	keyPool     = "pool"
	keySession  = "session"
	keyTTL      = "ttl"
	keySticky   = "sticky"
	keyStrategy = "strategy"
	keyAnon     = "anon"
)

var reservedKeys = []string{keyPool, keySession, keyTTL, keySticky, keyStrategy, keyAnon}

// ParseUsername reads a proxy username: an optional leading crawler name (the name of the
// crawler whose token is the password, so `crawler-7-…` reads naturally), then key-value pairs
// joined by '-': `crawler-7-pool-web-geo-de-session-abc123-ttl-600`. A value is
// percent-decoded, so `region-us%2Deast` is region=us-east. attrs are the attribute keys the
// gateway accepts besides the reserved ones. Every key is known, given once and has a value:
// anything else is an error naming the key, never a silent default.
func ParseUsername(username, crawler string, attrs []string) (Route, error) {
	var r Route
	if len(username) > maxUsername {
		return r, &UsernameError{Key: "(username)", Msg: fmt.Sprintf("longer than %d bytes", maxUsername)}
	}
	rest := username
	if crawler != "" {
		if rest == crawler {
			rest = ""
		} else if after, ok := strings.CutPrefix(rest, crawler+"-"); ok {
			rest = after
		}
	}
	if rest == "" {
		return r, nil
	}
	parts := strings.Split(rest, "-")
	seen := map[string]bool{}
	for i := 0; i < len(parts); i += 2 {
		key := parts[i]
		if key == "" {
			return Route{}, &UsernameError{Key: "(username)", Msg: "an empty key: two '-' in a row, or a '-' at an end"}
		}
		if !slices.Contains(reservedKeys, key) && !slices.Contains(attrs, key) {
			return Route{}, &UsernameError{Key: key, Msg: "unknown key: use " + strings.Join(append(slices.Clone(reservedKeys), attrs...), ", ") +
				" (the gateway's attribute keys are set with --gateway-attributes)"}
		}
		if seen[key] {
			return Route{}, &UsernameError{Key: key, Msg: "given twice"}
		}
		seen[key] = true
		if i+1 >= len(parts) || parts[i+1] == "" {
			return Route{}, &UsernameError{Key: key, Msg: "has no value (write " + key + "-VALUE)"}
		}
		value, err := url.PathUnescape(parts[i+1])
		if err != nil {
			return Route{}, &UsernameError{Key: key, Msg: "the value is not valid percent-encoding"}
		}
		if err := r.set(key, value); err != nil {
			return Route{}, err
		}
	}
	return r, r.check()
}

// set applies one key's value.
func (r *Route) set(key, value string) error {
	bad := func(msg string) error { return &UsernameError{Key: key, Msg: msg} }
	switch key {
	case keySession:
		if len(value) > maxSessionKey {
			return bad(fmt.Sprintf("at most %d bytes", maxSessionKey))
		}
		r.Session = value
	case keyTTL:
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || time.Duration(n)*time.Second > maxSessionTTL {
			return bad(fmt.Sprintf("must be whole seconds from 1 to %d, got %q", int(maxSessionTTL/time.Second), value))
		}
		r.SessionTTL = time.Duration(n) * time.Second
	case keySticky:
		switch events.StickyMode(value) {
		case events.StickySoft, events.StickyStrict:
			r.StickyMode = events.StickyMode(value)
		default:
			return bad(fmt.Sprintf("must be soft or strict, got %q", value))
		}
	case keyStrategy:
		s := events.Strategy(strings.ReplaceAll(value, "_", "-"))
		if !slices.Contains(events.Strategies, s) {
			names := make([]string, len(events.Strategies))
			for i, st := range events.Strategies {
				names[i] = strings.ReplaceAll(string(st), "-", "_") // a username has no dashes
			}
			return bad(fmt.Sprintf("must be one of %s, got %q", strings.Join(names, ", "), value))
		}
		r.Strategy = s
	case keyAnon:
		switch events.Anonymity(value) {
		case events.AnonymityAnonymous, events.AnonymityElite:
			r.MinAnonymity = events.Anonymity(value)
		default:
			return bad(fmt.Sprintf("must be anonymous or elite, got %q", value))
		}
	default: // pool and the attribute keys
		if len(value) > 256 {
			return bad("at most 256 bytes")
		}
		if r.Selector == nil {
			r.Selector = map[string]string{}
		}
		if len(r.Selector) >= maxSelectorPairs {
			return bad(fmt.Sprintf("more than %d selector pairs", maxSelectorPairs))
		}
		r.Selector[key] = value
	}
	return nil
}

// check refuses keys that mean nothing without a session.
func (r *Route) check() error {
	if r.Session == "" {
		switch {
		case r.SessionTTL != 0:
			return &UsernameError{Key: keyTTL, Msg: "is a session's lifetime: give a session key too (session-KEY)"}
		case r.StickyMode != "":
			return &UsernameError{Key: keySticky, Msg: "is a session's mode: give a session key too (session-KEY)"}
		}
		return nil
	}
	if r.SessionTTL == 0 {
		r.SessionTTL = DefaultSessionTTL
	}
	return nil
}
