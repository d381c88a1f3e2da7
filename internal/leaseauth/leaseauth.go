// Package leaseauth binds proxy access to leases (auth.mode "lease", docs/leases.md): the
// leaser signs, for each grant and renewal, a token bound to the proxy, the lease ID and the
// lease's expiry, and the proxy checks it offline with a key of its own. No NATS, no state:
// a proxy needs only its key and a clock.
//
// Keys. One installation master (32 random bytes, created by `egressd setup`, kept in the
// egress_locks bucket) derives one key per proxy instance, HMAC-SHA256(master,
// "egressd-lease-key", proxy name, instance). A proxy is given only its own key, so a proxy
// whose disk leaks cannot sign for another, nor for a later instance of its own name; the
// leasers and probers hold the master and derive any instance's key. A master has an ID, a
// digest of it, that every key and token names, so that a proxy can tell which master a
// token was signed with.
//
// Tokens travel as the basic-auth credential of a lease's URL:
//
//	username  the lease ID (any subject of 1 to 200 characters of [A-Za-z0-9._-])
//	password  v2.<master ID>.<instance>.<expiry, Unix seconds>.<base64url HMAC-SHA256(key,
//	          master ID, proxy, instance, subject, expiry)>
//
// Both are URL-safe, so the URL needs no escaping. A token is refused by a proxy whose
// instance is another (a proxy rebuilt under the same name), and once revoked (revoke.go).
// The package imports only the standard library: it runs inside every proxy (forward-proxy,
// squid-auth) as well as in the roles.
package leaseauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Sizes of the secrets, in bytes.
const (
	MasterSize = 32
	KeySize    = 32
)

// Skew is how long past its expiry a token is still accepted: the leaser's clock and the
// proxy's may disagree by this much. It is what a released or expired lease's token keeps
// beyond its own expiry, so it is small.
const Skew = 5 * time.Second

// MaxSubject bounds a token's subject (the lease ID).
const MaxSubject = 200

// tokenVersion starts every password; a later format gets another. v1 (no master ID, no
// instance) is no longer accepted.
const tokenVersion = "v2"

// MaxInstance bounds a token's instance (the proxy's generation, events.ProxyStatus).
const MaxInstance = 64

// Errors of Verify and the parsers. They never quote the input: a token is a credential.
var (
	ErrMalformed = errors.New("lease token: malformed")
	ErrSignature = errors.New("lease token: signature does not match")
	ErrExpired   = errors.New("lease token: expired")
	ErrInstance  = errors.New("lease token: issued for another instance of the proxy")
	ErrKeyID     = errors.New("lease token: signed with a master this proxy does not hold")
	ErrRevoked   = errors.New("lease token: revoked")
)

// Reason is a refusal's short name, for metrics and logs: malformed, signature, expired,
// instance, key or revoked ("" for nil, "other" for an error that is none of these).
func Reason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{ErrMalformed, "malformed"}, {ErrSignature, "signature"}, {ErrExpired, "expired"},
		{ErrInstance, "instance"}, {ErrKeyID, "key"}, {ErrRevoked, "revoked"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	if err == nil {
		return ""
	}
	return "other"
}

var b64 = base64.RawURLEncoding.Strict()

// Master is the installation's signing secret. It never prints.
type Master struct{ b []byte }

// NewMaster returns a fresh random master.
func NewMaster() Master {
	b := make([]byte, MasterSize)
	rand.Read(b) // never fails (crypto/rand)
	return Master{b: b}
}

// ParseMaster decodes a master as Encode wrote it. Its error never quotes the input.
func ParseMaster(text []byte) (Master, error) {
	b, err := b64.DecodeString(strings.TrimSpace(string(text)))
	if err != nil || len(b) != MasterSize {
		return Master{}, fmt.Errorf("lease master: want %d bytes in unpadded base64url", MasterSize)
	}
	return Master{b: b}, nil
}

// Encode is the stored form: unpadded base64url.
func (m Master) Encode() []byte { return []byte(b64.EncodeToString(m.b)) }

// IsZero reports whether m holds no secret (not configured).
func (m Master) IsZero() bool { return len(m.b) == 0 }

// ID names the master in keys and tokens: 8 characters of base64url, a digest of the master
// that reveals nothing of it. A zero master is "none", so that what it signs (nothing any key
// accepts) is still well-formed.
func (m Master) ID() string {
	if m.IsZero() {
		return "none"
	}
	h := hmac.New(sha256.New, m.b)
	h.Write([]byte("egressd-lease-master-id"))
	return b64.EncodeToString(h.Sum(nil))[:8]
}

// ProxyKey derives the key of proxy's instance "" (a proxy whose status names no
// generation). See InstanceKey.
func (m Master) ProxyKey(proxy string) Key { return m.InstanceKey(proxy, "") }

// InstanceKey derives the key of one instance of proxy. A zero master derives a zero key,
// which signs nothing valid.
func (m Master) InstanceKey(proxy, instance string) Key {
	k := Key{kid: m.ID(), proxy: proxy, instance: instance}
	if m.IsZero() {
		return k
	}
	h := hmac.New(sha256.New, m.b)
	h.Write([]byte("egressd-lease-key\x00" + tokenVersion + "\x00" + proxy + "\x00" + instance))
	k.b = h.Sum(nil)
	return k
}

func (Master) String() string                { return "[redacted]" }
func (Master) GoString() string              { return "[redacted]" }
func (Master) LogValue() slog.Value          { return slog.StringValue("[redacted]") }
func (Master) MarshalJSON() ([]byte, error)  { return []byte(`"[redacted]"`), nil }
func (Master) Format(f fmt.State, verb rune) { fmt.Fprint(f, "[redacted]") }

// Key is one proxy's key: what the proxy holds, and what signs its tokens. It never prints.
type Key struct {
	kid      string // the master's ID
	proxy    string
	instance string
	b        []byte
}

// Proxy is the name of the proxy the key belongs to.
func (k Key) Proxy() string { return k.proxy }

// Instance is the instance of the proxy the key belongs to.
func (k Key) Instance() string { return k.instance }

// KeyID is the ID of the master the key derives from.
func (k Key) KeyID() string { return k.kid }

// IsZero reports whether k holds no secret.
func (k Key) IsZero() bool { return len(k.b) == 0 }

// Sign returns the credential that lets subject use k's proxy until expires (truncated to
// the second, so a token never outlives what it stands for by more than Skew).
func (k Key) Sign(subject string, expires time.Time) (username, password string) {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return subject, tokenVersion + "." + k.kid + "." + k.instance + "." + exp + "." + b64.EncodeToString(k.mac(subject, exp))
}

func (k Key) mac(subject, exp string) []byte {
	h := hmac.New(sha256.New, k.b)
	// NUL-separated: no field can hold a NUL, so no two inputs run together.
	h.Write([]byte("egressd-lease-token\x00" + tokenVersion + "\x00" + k.kid + "\x00" + k.proxy + "\x00" +
		k.instance + "\x00" + subject + "\x00" + exp))
	return h.Sum(nil)
}

// Token is a parsed password.
type Token struct {
	KeyID    string // the ID of the master it was signed with
	Instance string // the instance of the proxy it was issued for
	Expires  time.Time
	exp      string // as written, which is what the MAC covers
	mac      []byte
}

// ParseToken parses a password without checking it. Its errors wrap ErrMalformed.
func ParseToken(password string) (Token, error) {
	rest, ok := strings.CutPrefix(password, tokenVersion+".")
	if !ok {
		return Token{}, fmt.Errorf("%w: not a %s token", ErrMalformed, tokenVersion)
	}
	f := strings.Split(rest, ".")
	if len(f) != 4 {
		return Token{}, fmt.Errorf("%w: want %s.<master ID>.<instance>.<expiry>.<signature>", ErrMalformed, tokenVersion)
	}
	kid, instance, exp, mac := f[0], f[1], f[2], f[3]
	if err := validField(kid, 1, MaxInstance); err != nil {
		return Token{}, fmt.Errorf("%w: master ID: %w", ErrMalformed, err)
	}
	if err := validField(instance, 0, MaxInstance); err != nil {
		return Token{}, fmt.Errorf("%w: instance: %w", ErrMalformed, err)
	}
	// Canonical decimal only: the signature covers the digits as written, and one expiry has
	// one spelling.
	if exp == "" || len(exp) > 12 || (exp[0] == '0' && exp != "0") || strings.Trim(exp, "0123456789") != "" {
		return Token{}, fmt.Errorf("%w: expiry is not a decimal Unix time", ErrMalformed)
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: expiry is not a decimal Unix time", ErrMalformed)
	}
	// The decoder skips CR and LF: refuse them first, so that one signature has one spelling.
	sum, err := b64.DecodeString(mac)
	if err != nil || len(sum) != sha256.Size || validField(mac, 0, len(mac)) != nil {
		return Token{}, fmt.Errorf("%w: signature is not %d bytes of unpadded base64url", ErrMalformed, sha256.Size)
	}
	return Token{KeyID: kid, Instance: instance, Expires: time.Unix(secs, 0), exp: exp, mac: sum}, nil
}

// validField checks a token's master ID or instance: min to max characters of
// [A-Za-z0-9_-] (no '.', which separates the fields).
func validField(s string, min, max int) error {
	if len(s) < min || len(s) > max {
		return fmt.Errorf("must be %d to %d characters", min, max)
	}
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return errors.New("may hold only letters, digits, '_' and '-'")
	}
	return nil
}

// ValidInstance checks an instance name as tokens and key lines carry it.
func ValidInstance(s string) error { return validField(s, 0, MaxInstance) }

// ValidSubject checks a token's subject: 1 to MaxSubject characters of [A-Za-z0-9._-].
func ValidSubject(s string) error {
	if s == "" || len(s) > MaxSubject {
		return fmt.Errorf("%w: subject must be 1 to %d characters", ErrMalformed, MaxSubject)
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: subject may hold only letters, digits, '.', '_' and '-'", ErrMalformed)
		}
	}
	return nil
}

// Verify checks a basic-auth credential against k at now: ErrMalformed, ErrKeyID (signed
// with a master k does not derive from), ErrInstance (issued for another instance of the
// proxy: one since rebuilt under its name), ErrSignature (a forged or altered token, another
// proxy's, or one signed with another key) or ErrExpired (authentic, but now is more than Skew
// past its expiry). The master ID and instance are public; the signature is checked in
// constant time before the expiry, so a forged token never learns more than that it is wrong.
func (k Key) Verify(username, password string, now time.Time) error {
	_, err := k.VerifyToken(username, password, now)
	return err
}

// VerifyToken is Verify that also returns the token it passed, for a caller that needs its
// expiry (a tunnel lives no longer than its token) without parsing it again.
func (k Key) VerifyToken(username, password string, now time.Time) (Token, error) {
	if k.IsZero() {
		return Token{}, ErrSignature
	}
	if err := ValidSubject(username); err != nil {
		return Token{}, err
	}
	t, err := ParseToken(password)
	if err != nil {
		return Token{}, err
	}
	switch {
	case t.KeyID != k.kid:
		return Token{}, ErrKeyID
	case t.Instance != k.instance:
		return Token{}, ErrInstance
	case !hmac.Equal(t.mac, k.mac(username, t.exp)):
		return Token{}, ErrSignature
	case now.After(t.Expires.Add(Skew)):
		return Token{}, ErrExpired
	}
	return t, nil
}

// fileScheme names a key line among the lines of a proxy's auth file.
const fileScheme = "lease"

// FileLine is how a proxy's key is written for the proxy (forward-proxy's --auth-file,
// squid-auth's --key-file): one line, <proxy>:lease:<master ID>:<instance>:<base64url key>.
func (k Key) FileLine() string {
	return k.proxy + ":" + fileScheme + ":" + k.kid + ":" + k.instance + ":" + b64.EncodeToString(k.b) + "\n"
}

// IsFileLine reports whether an auth file line is a key line (and not a password's).
func IsFileLine(line string) bool {
	parts := strings.Split(strings.TrimRight(line, "\r\n"), ":")
	return len(parts) == 5 && parts[1] == fileScheme
}

// ParseFileLine reads a key line. Its errors never quote the line.
func ParseFileLine(line string) (Key, error) {
	text := strings.TrimRight(line, "\r\n")
	if strings.ContainsAny(text, "\r\n") {
		return Key{}, errors.New("lease key file: more than one line")
	}
	parts := strings.Split(text, ":")
	if len(parts) != 5 || parts[1] != fileScheme {
		return Key{}, fmt.Errorf("lease key file: want <proxy>:%s:<master ID>:<instance>:<base64url key>", fileScheme)
	}
	if err := ValidSubject(parts[0]); err != nil {
		return Key{}, errors.New("lease key file: the proxy name is not valid")
	}
	if validField(parts[2], 1, MaxInstance) != nil {
		return Key{}, errors.New("lease key file: the master ID is not valid")
	}
	if validField(parts[3], 0, MaxInstance) != nil {
		return Key{}, errors.New("lease key file: the instance is not valid")
	}
	b, err := b64.DecodeString(parts[4])
	if err != nil || len(b) != KeySize || validField(parts[4], 0, len(parts[4])) != nil {
		return Key{}, fmt.Errorf("lease key file: the key is not %d bytes of unpadded base64url", KeySize)
	}
	return Key{kid: parts[2], proxy: parts[0], instance: parts[3], b: b}, nil
}

func (Key) String() string                { return "[redacted]" }
func (Key) GoString() string              { return "[redacted]" }
func (Key) LogValue() slog.Value          { return slog.StringValue("[redacted]") }
func (Key) MarshalJSON() ([]byte, error)  { return []byte(`"[redacted]"`), nil }
func (Key) Format(f fmt.State, verb rune) { fmt.Fprint(f, "[redacted]") }
