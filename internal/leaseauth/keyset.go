package leaseauth

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// MaxKeys bounds the key lines of one proxy: a rotation holds two masters at once.
const MaxKeys = 4

// KeySet is what a lease-mode proxy holds: its instance's key under each master the
// installation accepts, one key line each (a rotation, decision 88). A token is checked with
// the key its master ID names, so a proxy accepts the tokens of every master it holds and
// refuses those of any other (ErrKeyID). It never prints.
type KeySet struct{ keys []Key }

// NewKeySet gathers keys of one proxy instance, one per master.
func NewKeySet(keys ...Key) (KeySet, error) {
	if len(keys) == 0 || len(keys) > MaxKeys {
		return KeySet{}, fmt.Errorf("lease key file: want 1 to %d key lines", MaxKeys)
	}
	for i, k := range keys {
		if k.proxy != keys[0].proxy || k.instance != keys[0].instance {
			return KeySet{}, errors.New("lease key file: key lines of different proxies or instances")
		}
		if slices.ContainsFunc(keys[:i], func(o Key) bool { return o.kid == k.kid }) {
			return KeySet{}, errors.New("lease key file: two key lines of one master")
		}
	}
	return KeySet{keys: slices.Clone(keys)}, nil
}

// ParseKeyLines reads one or more key lines (FileLines' form). Its errors never quote the text.
func ParseKeyLines(text string) (KeySet, error) {
	lines := strings.Split(strings.TrimRight(text, "\r\n"), "\n")
	if len(lines) > MaxKeys {
		return KeySet{}, fmt.Errorf("lease key file: more than %d key lines", MaxKeys)
	}
	keys := make([]Key, 0, len(lines))
	for i, line := range lines {
		k, err := ParseFileLine(line)
		if err != nil {
			return KeySet{}, fmt.Errorf("line %d: %w", i+1, err)
		}
		keys = append(keys, k)
	}
	return NewKeySet(keys...)
}

// AreFileLines reports whether every line of text is a key line.
func AreFileLines(text string) bool {
	lines := strings.Split(strings.TrimRight(text, "\r\n"), "\n")
	return !slices.ContainsFunc(lines, func(l string) bool { return !IsFileLine(l) })
}

// FileLines is the key file of keys: one FileLine each.
func FileLines(keys ...Key) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k.FileLine())
	}
	return b.String()
}

// FileLines is the set's key file.
func (s KeySet) FileLines() string { return FileLines(s.keys...) }

// Proxy is the proxy the keys belong to.
func (s KeySet) Proxy() string {
	if len(s.keys) == 0 {
		return ""
	}
	return s.keys[0].proxy
}

// Instance is the instance the keys belong to.
func (s KeySet) Instance() string {
	if len(s.keys) == 0 {
		return ""
	}
	return s.keys[0].instance
}

// IDs are the IDs of the masters the set holds keys of, in file order. They are no secret.
func (s KeySet) IDs() []string {
	ids := make([]string, len(s.keys))
	for i, k := range s.keys {
		ids[i] = k.kid
	}
	return ids
}

// VerifyToken checks a credential with the key of the master the token names: Key.VerifyToken,
// or ErrKeyID when the set holds no key of that master.
func (s KeySet) VerifyToken(username, password string, now time.Time) (Token, error) {
	if len(s.keys) == 1 {
		return s.keys[0].VerifyToken(username, password, now)
	}
	_, rest, _ := strings.Cut(password, ".")
	kid, _, _ := strings.Cut(rest, ".")
	for _, k := range s.keys {
		if k.kid == kid {
			return k.VerifyToken(username, password, now)
		}
	}
	if err := ValidSubject(username); err != nil {
		return Token{}, err
	}
	if _, err := ParseToken(password); err != nil {
		return Token{}, err
	}
	return Token{}, ErrKeyID
}

// Verify is VerifyToken without the token.
func (s KeySet) Verify(username, password string, now time.Time) error {
	_, err := s.VerifyToken(username, password, now)
	return err
}

func (KeySet) String() string                { return "[redacted]" }
func (KeySet) GoString() string              { return "[redacted]" }
func (KeySet) LogValue() slog.Value          { return slog.StringValue("[redacted]") }
func (KeySet) Format(f fmt.State, verb rune) { fmt.Fprint(f, "[redacted]") }
