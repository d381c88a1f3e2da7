package libvirt

import (
	"encoding/xml"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/providers"
)

// metadataNS is egressd's namespace in a domain's <metadata>. libvirt selects metadata by
// namespace, so domains marked by other tools (or by the original operator's providers) are
// invisible to List and GC.
const metadataNS = "https://github.com/egressd/egressd/providers/libvirt/v1"

// marks is the element egressd writes into the domain's <metadata> in the same
// DomainDefineXML call that creates it, so no domain of ours ever exists unmarked. Besides
// the marks of the contract it keeps what Get must answer from the backend: the port, and
// the MAC that picks the guest's address.
type marks struct {
	XMLName      xml.Name `xml:"instance"`
	Managed      bool     `xml:"managed"`
	UID          string   `xml:"uid"`
	Installation string   `xml:"installation"`
	CreatedAt    string   `xml:"createdAt"`
	ExpiresAt    string   `xml:"expiresAt,omitempty"` // the lifetime's end; absent: none
	Provider     string   `xml:"provider"`
	Proxy        string   `xml:"proxy,omitempty"`
	Port         int      `xml:"port"`
	MAC          string   `xml:"mac"`
	Image        string   `xml:"image"`
}

// metadataElement is marks as it sits in the domain XML, in egressd's namespace.
type metadataElement struct {
	marks
	XMLName xml.Name `xml:"https://github.com/egressd/egressd/providers/libvirt/v1 instance"`
}

// parseMarks reads the element DomainGetMetadata returned. libvirt prints it without the
// xmlns, so it is matched by local name; the namespace was already selected by the call.
func parseMarks(raw string) (marks, error) {
	var m marks
	if err := xml.Unmarshal([]byte(raw), &m); err != nil {
		return marks{}, fmt.Errorf("%w: %v", errBadMarks, err)
	}
	// A UID padded or re-cased by hand must not make GC take a live proxy's VM for an orphan.
	m.UID = strings.TrimSpace(m.UID)
	m.Installation = strings.TrimSpace(m.Installation)
	m.MAC = strings.ToLower(strings.TrimSpace(m.MAC))
	return m, nil
}

// contract returns the marks as the provider contract has them. A createdAt that does not
// parse reads as zero, "very old"; an expiresAt that does not, as no lifetime.
func (m marks) contract() providers.Marks {
	t, _ := time.Parse(time.RFC3339Nano, strings.TrimSpace(m.CreatedAt))
	exp, _ := time.Parse(time.RFC3339Nano, strings.TrimSpace(m.ExpiresAt))
	return providers.Marks{Managed: m.Managed, UID: m.UID, Installation: m.Installation, CreatedAt: t, ExpiresAt: exp}
}

// stamp is the creation mark: the time, and the lifetime's end when the request has one.
func stamp(now time.Time, lifetime time.Duration) (created, expires string) {
	now = now.UTC()
	if exp := providers.ExpiryOf(now, lifetime); !exp.IsZero() {
		expires = exp.Format(time.RFC3339Nano)
	}
	return now.Format(time.RFC3339Nano), expires
}
