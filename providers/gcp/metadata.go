package gcp

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"

	"github.com/egressd/egressd/providers"
)

// Labels egressd writes in the insert that creates an instance, so no instance of ours ever
// exists unmarked. List filters on the first two.
const (
	labelManaged      = "egressd-managed"
	labelProvider     = "egressd-provider"
	labelUID          = "egressd-uid"
	labelInstallation = "egressd-installation"
	labelCreatedAt    = "egressd-created-ms" // Unix milliseconds: label values hold no ':'
	labelExpiresAt    = "egressd-expires-ms" // Unix milliseconds; absent: no lifetime
	labelPort         = "egressd-port"
	labelFirewall     = "egressd-firewall" // the rule the instance's port needs, "" when unmanaged
)

// Metadata items of an instance.
const (
	// MetadataUserData is cloud-init's user-data, byte for byte.
	MetadataUserData = "user-data"
	// MetadataProxy is the ProxyConfig document.
	MetadataProxy = "egressd-proxy"

	maxUserData = 256 << 10 // the service's bound on one metadata value
)

// labelValue is what a label value may hold
// (https://cloud.google.com/compute/docs/labeling-resources#requirements).
var labelValue = regexp.MustCompile(`^[a-z0-9_-]{1,63}$`)

// marks are the labels as the contract has them.
func marksOf(labels map[string]string) providers.Marks {
	m := providers.Marks{
		Managed:      labels[labelManaged] == "true",
		UID:          labels[labelUID],
		Installation: labels[labelInstallation],
	}
	// A value that does not parse reads as zero, "very old".
	if ms, err := strconv.ParseInt(labels[labelCreatedAt], 10, 64); err == nil && ms > 0 {
		m.CreatedAt = time.UnixMilli(ms).UTC()
	}
	if ms, err := strconv.ParseInt(labels[labelExpiresAt], 10, 64); err == nil && ms > 0 {
		m.ExpiresAt = time.UnixMilli(ms).UTC()
	}
	return m
}

func (p *Provider) labels(req providers.CreateRequest, rule string) map[string]string {
	now := p.now()
	l := map[string]string{
		labelManaged:      "true",
		labelProvider:     p.name,
		labelUID:          req.UID,
		labelInstallation: req.Installation,
		labelCreatedAt:    strconv.FormatInt(now.UnixMilli(), 10),
		labelPort:         strconv.Itoa(req.Port),
	}
	if exp := providers.ExpiryOf(now, req.Lifetime); !exp.IsZero() {
		// Computed from the same reading of the clock as the creation mark, both rounded to
		// the millisecond alike, so the lifetime reads back exact.
		l[labelExpiresAt] = strconv.FormatInt(exp.UnixMilli(), 10)
	}
	if rule != "" {
		l[labelFirewall] = rule
	}
	return l
}

// ProxyConfig is the `egressd-proxy` metadata item (providers.ProxyConfig), for images that
// run egressd's forward proxy; the same document as the libvirt provider's egressd.json.
type ProxyConfig = providers.ProxyConfig

// ReadProxyConfig reads the document from an instance's metadata items, as an image's
// startup script does from the metadata server.
func ReadProxyConfig(metadata map[string]string) (ProxyConfig, error) {
	raw, ok := metadata[MetadataProxy]
	if !ok {
		return ProxyConfig{}, errors.New("no " + MetadataProxy + " metadata item")
	}
	var c ProxyConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		return ProxyConfig{}, fmt.Errorf("%s: %w", MetadataProxy, err)
	}
	if c.V != 1 || c.Port < 1 || c.Port > 65535 {
		return ProxyConfig{}, fmt.Errorf("%s: version %d, port %d: want version 1 and a port", MetadataProxy, c.V, c.Port)
	}
	return c, nil
}

// metadata is the instance's metadata: user-data and the proxy document.
func metadata(req providers.CreateRequest) (*computepb.Metadata, error) {
	doc, err := json.Marshal(providers.ProxyConfigOf(req.Name, req.Port, req.Auth))
	if err != nil {
		return nil, err
	}
	ud, pd := string(req.UserData), string(doc)
	return &computepb.Metadata{Items: []*computepb.Items{
		{Key: strPtr(MetadataUserData), Value: &ud},
		{Key: strPtr(MetadataProxy), Value: &pd},
	}}, nil
}

func strPtr(s string) *string { return &s }
