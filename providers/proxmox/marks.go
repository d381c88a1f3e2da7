package proxmox

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// The marks live in the VM's description, one key=value per line, written by the clone call
// that creates the VM (PVE takes the description verbatim, newlines included, F10). PVE's own
// meta ctime is the template's (F11), so CreatedAt must be ours. Lines of other tools and a
// human's notes around them are left alone and ignored.
const (
	markManaged      = "egressd-managed"
	markUID          = "egressd-uid"
	markInstallation = "egressd-installation"
	markCreatedAt    = "egressd-created-at"
	markExpiresAt    = "egressd-expires-at" // absent: no lifetime
	markProvider     = "egressd-provider"
	markPort         = "egressd-port"
	markProxy        = "egressd-proxy"
)

// tag is set on every VM in the config step: for humans in the UI, and for List to find
// candidates in one call. PVE folds tags to lowercase and takes hyphens (F9).
const tag = "egressd"

// marks is what egressd writes into a description: the contract's marks, the provider that
// owns the VM (two providers may share a cluster), and the port Get must report.
type marks struct {
	Managed      bool
	UID          string
	Installation string
	CreatedAt    time.Time
	ExpiresAt    time.Time // zero: no lifetime
	Provider     string
	Port         int
	Proxy        string
}

// description renders the marks, the proxy's name last (it is for humans only).
func (m marks) description() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s=%t\n", markManaged, m.Managed)
	fmt.Fprintf(&b, "%s=%s\n", markUID, m.UID)
	fmt.Fprintf(&b, "%s=%s\n", markInstallation, m.Installation)
	fmt.Fprintf(&b, "%s=%s\n", markCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339))
	if !m.ExpiresAt.IsZero() {
		fmt.Fprintf(&b, "%s=%s\n", markExpiresAt, m.ExpiresAt.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(&b, "%s=%s\n", markProvider, m.Provider)
	fmt.Fprintf(&b, "%s=%d\n", markPort, m.Port)
	if p := oneLine(m.Proxy); p != "" {
		fmt.Fprintf(&b, "%s=%s\n", markProxy, p)
	}
	return b.String()
}

// parseMarks reads the marks from a description. found is false when no egressd line is
// there. Values are trimmed: a UID padded by hand must not make GC take a live proxy's VM
// for an orphan. A created-at that does not parse reads as zero, "very old".
func parseMarks(desc string) (m marks, found bool) {
	for line := range strings.Lines(desc) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch strings.TrimSpace(k) {
		case markManaged:
			m.Managed, found = v == "true", true
		case markUID:
			m.UID, found = v, true
		case markInstallation:
			m.Installation = v
		case markCreatedAt:
			m.CreatedAt, _ = time.Parse(time.RFC3339, v)
		case markExpiresAt:
			m.ExpiresAt, _ = time.Parse(time.RFC3339, v)
		case markProvider:
			m.Provider = v
		case markPort:
			m.Port, _ = strconv.Atoi(v)
		case markProxy:
			m.Proxy = v
		}
	}
	return m, found
}

func (m marks) contract() providers.Marks {
	return providers.Marks{Managed: m.Managed, UID: m.UID, Installation: m.Installation, CreatedAt: m.CreatedAt, ExpiresAt: m.ExpiresAt}
}

// oneLine keeps a human's text from breaking the line format.
func oneLine(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s))
}
