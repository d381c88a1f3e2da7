package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/egressd/egressd/providers/local/internal/atomicfile"
)

// On disk, under StateDir:
//
//	<name>/instance.json   marks and placement, written before the process starts
//	<name>/pid             written by the proxy itself once it listens
//	<name>/proxy.log       the proxy's log
//	<name>/auth            the basic-auth credential, when the request has one
//	<name>.lock            flock for Create and Delete of <name>
//	.alloc.lock            flock for picking addresses
//	.tmp-*, .trash-*       instance directories being born or removed
//
// An instance directory appears and disappears by rename, so that a reader sees either no
// directory or one with its instance.json.
const (
	metaFile    = "instance.json"
	pidFile     = "pid"
	logFile     = "proxy.log"
	authFile    = "auth"
	allocLock   = ".alloc.lock"
	tmpPrefix   = ".tmp-"
	trashPrefix = ".trash-"
)

// meta is instance.json.
type meta struct {
	V            int       `json:"v"`
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	UID          string    `json:"uid"`
	Installation string    `json:"installation"`
	Managed      bool      `json:"managed"`
	CreatedAt    time.Time `json:"createdAt"`
	ExpiresAt    time.Time `json:"expiresAt,omitzero"` // the lifetime's end; zero: none
	Proxy        string    `json:"proxy,omitempty"`
	Address      string    `json:"address"`
	Port         int       `json:"port"`
	BindSource   bool      `json:"bindSource"`
	Auth         bool      `json:"auth"`
}

const idPrefix = "local/"

var label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validName accepts DNS-1123 labels: they are safe as a path element and in an ID.
func validName(name string) error {
	if len(name) == 0 || len(name) > 63 || !label.MatchString(name) {
		return fmt.Errorf("%w: name %q is not a DNS-1123 label", errBadRequest, name)
	}
	return nil
}

func idOf(name string) string { return idPrefix + name }

// parseID returns the instance name in an ID of the form local/<name>.
func parseID(id string) (string, error) {
	name, ok := strings.CutPrefix(id, idPrefix)
	if !ok || validName(name) != nil {
		return "", fmt.Errorf("%w %q: want %s<instance name>", errBadID, id, idPrefix)
	}
	return name, nil
}

func (p *Provider) dir(name string) string      { return filepath.Join(p.stateDir, name) }
func (p *Provider) lockPath(name string) string { return filepath.Join(p.stateDir, name+".lock") }
func (p *Provider) pidPath(name string) string  { return filepath.Join(p.stateDir, name, pidFile) }

// readMeta reads an instance's instance.json. errNoInstance when the directory is gone.
func (p *Provider) readMeta(name string) (*meta, error) {
	data, err := os.ReadFile(filepath.Join(p.dir(name), metaFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(p.dir(name)); errors.Is(serr, fs.ErrNotExist) {
			return nil, errNoInstance
		}
		return nil, fmt.Errorf("%w: %s has no %s", errCorrupt, name, metaFile)
	}
	if err != nil {
		return nil, err
	}
	return decodeMeta(name, data)
}

func decodeMeta(name string, data []byte) (*meta, error) {
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %s/%s: %v", errCorrupt, name, metaFile, err)
	}
	// Newer minor versions may add fields, which Unmarshal ignores; what we use must hold.
	a, aerr := netip.ParseAddr(m.Address)
	switch {
	case m.V < 1:
		return nil, fmt.Errorf("%w: %s/%s: no version", errCorrupt, name, metaFile)
	case m.Name != name:
		return nil, fmt.Errorf("%w: %s/%s names %q", errCorrupt, name, metaFile, m.Name)
	case aerr != nil || !a.IsValid():
		return nil, fmt.Errorf("%w: %s/%s: bad address %q", errCorrupt, name, metaFile, m.Address)
	case m.Port < 1 || m.Port > 65535:
		return nil, fmt.Errorf("%w: %s/%s: bad port %d", errCorrupt, name, metaFile, m.Port)
	}
	return &m, nil
}

func writeMeta(dir string, m *meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, metaFile), append(data, '\n'), 0o600)
}

// instanceNames lists the directories that may be instances. A missing state dir holds none.
func (p *Provider) instanceNames() ([]string, error) {
	entries, err := os.ReadDir(p.stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && validName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
