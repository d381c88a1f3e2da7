package forwardproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers/local/internal/atomicfile"
)

// The auth file holds one line, either a password's
//
//	username:sha256:<hex salt>:<hex sha256(salt bytes + password)>
//
// so that the password itself is never on disk next to the proxy, or a lease key's
//
//	<proxy>:lease:<master ID>:<instance>:<base64url key>
//
// lines, one per master the installation accepts (internal/leaseauth; two during a master
// rotation, decision 88): then only lease tokens signed with that key, unexpired, pass. The key
// itself has to be on disk, since checking a signature takes it; it is this proxy's own,
// derived from the installation's master, and signs for no other proxy.

const authScheme = "sha256"

// WriteAuthFile writes the credential for username and password to path, atomically and with
// mode 0600, so that a running proxy switches from the old credential to the new one between
// two requests.
func WriteAuthFile(path, username, password string) error {
	if username == "" || strings.ContainsAny(username, ":\r\n") {
		return errors.New("auth file: username must be non-empty and contain no ':' or line break")
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	sum := saltedSum(salt, password)
	line := username + ":" + authScheme + ":" + hex.EncodeToString(salt) + ":" + hex.EncodeToString(sum[:]) + "\n"
	if err := atomicfile.Write(path, []byte(line), 0o600); err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	return nil
}

// checker is what an auth file says: whether a basic-auth credential may pass at now (nil),
// or why not.
type checker interface {
	check(username, password string, now time.Time) error
}

// errPassword refuses a credential that does not match a password line.
var errPassword = errors.New("wrong username or password")

// WriteLeaseKeyFile writes lease key lines (leaseauth.FileLines: one per master the proxy
// accepts, decision 88) to path, atomically and with mode 0600, after checking that they parse.
func WriteLeaseKeyFile(path, line string) error {
	if _, err := leaseauth.ParseKeyLines(line); err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	if err := atomicfile.Write(path, []byte(strings.TrimRight(line, "\r\n")+"\n"), 0o600); err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	return nil
}

// leaseChecker passes lease tokens signed with one of its keys (one per master).
type leaseChecker struct{ keys leaseauth.KeySet }

func (l leaseChecker) check(username, password string, now time.Time) error {
	return l.keys.Verify(username, password, now)
}

type credential struct {
	userSum [32]byte // hashed so that comparing names takes the same time whatever their length
	salt    []byte
	sum     [32]byte
}

func saltedSum(salt []byte, password string) [32]byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(password))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// parseAuthFile parses the file's content. Its errors never quote the content.
func parseAuthFile(data []byte) (checker, error) {
	text := strings.TrimRight(string(data), "\r\n")
	if text == "" {
		return nil, errors.New("empty")
	}
	if leaseauth.AreFileLines(text) {
		keys, err := leaseauth.ParseKeyLines(text)
		if err != nil {
			return nil, err
		}
		return leaseChecker{keys: keys}, nil
	}
	if strings.ContainsAny(text, "\r\n") {
		return nil, errors.New("more than one line")
	}
	parts := strings.Split(text, ":")
	if len(parts) != 4 {
		return nil, errors.New("want username:sha256:<hex salt>:<hex sum>")
	}
	if parts[0] == "" {
		return nil, errors.New("empty username")
	}
	if parts[1] != authScheme {
		return nil, fmt.Errorf("unsupported scheme %q (want %q)", parts[1], authScheme)
	}
	salt, err := hex.DecodeString(parts[2])
	if err != nil || len(salt) == 0 {
		return nil, errors.New("salt is not non-empty hex")
	}
	sum, err := hex.DecodeString(parts[3])
	if err != nil || len(sum) != sha256.Size {
		return nil, errors.New("sum is not 64 hex digits")
	}
	c := &credential{userSum: sha256.Sum256([]byte(parts[0])), salt: salt}
	copy(c.sum[:], sum)
	return c, nil
}

func (c *credential) check(username, password string, _ time.Time) error {
	u := sha256.Sum256([]byte(username))
	p := saltedSum(c.salt, password)
	// Both comparisons always run: a wrong name takes as long as a wrong password.
	if subtle.ConstantTimeCompare(u[:], c.userSum[:])&subtle.ConstantTimeCompare(p[:], c.sum[:]) != 1 {
		return errPassword
	}
	return nil
}

// FileAuthenticator checks basic-auth credentials (Proxy-Authorization, or what Squid hands
// `egressd squid-auth`) against an auth file, a password's hash or a lease key, re-reading the
// file whenever it changes on disk. An unreadable or corrupt file denies every request: the
// proxy fails closed. With a revocation list (WithRevocations), lease tokens it names are
// refused too.
type FileAuthenticator struct {
	path    string
	log     *slog.Logger
	revoked *revocationFile // nil: no revocation list
	refused refusals

	mu     sync.Mutex
	loaded bool // seen is the file state cred reflects
	seen   fileKey
	cred   checker
}

// fileKey changes whenever the file is replaced or rewritten. The inode covers an atomic
// replacement within the file system's mtime granularity.
type fileKey struct {
	ok    bool
	mtime int64
	size  int64
	ino   uint64
}

// NewFileAuthenticator checks credentials against the auth file at path.
func NewFileAuthenticator(path string, log *slog.Logger) *FileAuthenticator {
	return &FileAuthenticator{path: path, log: log}
}

// WithRevocations has a refuse the lease tokens the revocation list at path names
// (leaseauth.ParseRevocations), re-read when it changes. A missing file revokes nothing; a
// corrupt one leaves the last list read in force. It returns a.
func (a *FileAuthenticator) WithRevocations(path string) *FileAuthenticator {
	if path != "" {
		a.revoked = &revocationFile{path: path, log: a.log}
	}
	return a
}

// errNoCredentials refuses a request without basic-auth credentials.
var errNoCredentials = errors.New("no basic-auth credentials")

func (a *FileAuthenticator) checkHeader(header string) (grant, error) {
	user, pass, ok := parseBasic(header)
	if !ok {
		a.refused.add(errNoCredentials)
		return grant{}, errNoCredentials
	}
	return a.check(user, pass)
}

// grant is what a credential that passed is good for: a lease token's subject and expiry
// (zero for a password, which never expires).
type grant struct {
	subject string
	expires time.Time
}

// Check says whether a basic-auth credential passes the auth file as it is now on disk (nil),
// or why not (leaseauth's errors for a lease token; never quoting the credential).
func (a *FileAuthenticator) Check(username, password string) error {
	_, err := a.check(username, password)
	return err
}

func (a *FileAuthenticator) check(username, password string) (grant, error) {
	now := time.Now()
	c := a.current()
	var g grant
	err := errAuthFile
	if lc, lease := c.(leaseChecker); lease {
		// A lease token: its expiry bounds the tunnel it opens, and its lease may be revoked.
		var t leaseauth.Token
		if t, err = lc.keys.VerifyToken(username, password, now); err == nil {
			err = a.revokedAt(username, now)
			g = grant{subject: username, expires: t.Expires}
		}
	} else if c != nil {
		err = c.check(username, password, now)
	}
	a.refused.add(err)
	return g, err
}

// revokedAt says ErrRevoked when subject's tokens are on the revocation list at now.
func (a *FileAuthenticator) revokedAt(subject string, now time.Time) error {
	if a.revoked == nil {
		return nil
	}
	return a.revoked.current().Check(subject, now)
}

// Refused is how many credentials were refused since the start, by reason (leaseauth.Reason,
// or "credentials" for a missing header, a wrong password or an unusable auth file).
func (a *FileAuthenticator) Refused() map[string]int64 { return a.refused.snapshot() }

// errAuthFile refuses every credential while the auth file is unusable.
var errAuthFile = errors.New("the auth file is unusable")

// CheckAuthFile reports whether the auth file at path is usable now.
func CheckAuthFile(path string) error {
	_, err := loadAuthFile(path)
	return err
}

func (a *FileAuthenticator) current() checker {
	a.mu.Lock()
	defer a.mu.Unlock()
	key, err := statFile(a.path)
	if a.loaded && key == a.seen {
		return a.cred
	}
	a.loaded, a.seen, a.cred = true, key, nil
	if err != nil {
		a.log.Warn("auth file unreadable; denying every request", "path", a.path, "err", err)
		return nil
	}
	c, err := loadAuthFile(a.path)
	if err != nil {
		a.log.Warn("auth file unusable; denying every request", "path", a.path, "err", err)
		return nil
	}
	a.cred = c
	a.log.Info("auth file loaded", "path", a.path)
	return c
}

// statFile is path's fileKey, zero with the error when it cannot be read.
func statFile(path string) (fileKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileKey{}, err
	}
	key := fileKey{ok: true, mtime: fi.ModTime().UnixNano(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key.ino = st.Ino
	}
	return key, nil
}

func loadAuthFile(path string) (checker, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseAuthFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func parseBasic(header string) (user, pass string, ok bool) {
	const prefix = "basic "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(header[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}
