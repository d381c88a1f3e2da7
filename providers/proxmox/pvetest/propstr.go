package pvetest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// PVE config values are property strings (PVE::JSONSchema::parse_property_string): comma-
// separated key=value pairs, the first of which may be a bare value for the format's default
// key — "local-lvm:vm-100-disk-0,size=3G" (a drive, default key file),
// "virtio=BC:24:11:2F:3A:4B,bridge=vmbr0,tag=4" (net: model=MAC), "order=scsi0;ide2" (boot).

type kv struct{ k, v string }

// propString is a parsed property string, in its order.
type propString []kv

var propKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// parsePropString splits s. defaultKey names a bare leading value ("" if the format has none).
func parsePropString(s, defaultKey string) (propString, error) {
	if s == "" {
		return nil, errors.New("empty value")
	}
	var p propString
	for i, part := range strings.Split(s, ",") {
		if part == "" {
			return nil, errors.New("empty element")
		}
		k, v, hasEq := strings.Cut(part, "=")
		if !hasEq || !propKeyRE.MatchString(k) {
			if i != 0 || defaultKey == "" {
				return nil, fmt.Errorf("value without key: %q", part)
			}
			k, v = defaultKey, part
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("%s: line break in value", k)
		}
		if _, dup := p.get(k); dup {
			return nil, fmt.Errorf("duplicate key in comma-separated list property: %s", k)
		}
		p = append(p, kv{k, v})
	}
	return p, nil
}

func (p propString) get(k string) (string, bool) {
	for _, e := range p {
		if e.k == k {
			return e.v, true
		}
	}
	return "", false
}

func (p *propString) set(k, v string) {
	for i, e := range *p {
		if e.k == k {
			(*p)[i].v = v
			return
		}
	}
	*p = append(*p, kv{k, v})
}

// format writes p back; a leading defaultKey pair is written bare.
func (p propString) format(defaultKey string) string {
	parts := make([]string, len(p))
	for i, e := range p {
		if i == 0 && e.k == defaultKey && defaultKey != "" {
			parts[i] = e.v
			continue
		}
		parts[i] = e.k + "=" + e.v
	}
	return strings.Join(parts, ",")
}

// netModels are qemu-server's NIC models; net's first pair is model=MAC.
var netModels = map[string]bool{"virtio": true, "e1000": true, "e1000e": true, "rtl8139": true, "vmxnet3": true}

var (
	macRE    = regexp.MustCompile(`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`)
	bridgeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,14}$`)
)

// netConf is a parsed netN value.
type netConf struct {
	Model, MAC, Bridge string
	Tag                int // 0: untagged
	p                  propString
}

// parseNet parses a netN value: "virtio=BC:24:…,bridge=vmbr0[,tag=N][,firewall=1]…" or
// "model=virtio[,macaddr=…],…". An absent MAC is "" (the caller generates one).
func parseNet(s string) (netConf, error) {
	p, err := parsePropString(s, "")
	if err != nil {
		return netConf{}, err
	}
	var n netConf
	for _, e := range p {
		switch {
		case netModels[e.k]:
			if n.Model != "" {
				return netConf{}, errors.New("two models")
			}
			n.Model, n.MAC = e.k, e.v
		case e.k == "model":
			if n.Model != "" || !netModels[e.v] {
				return netConf{}, fmt.Errorf("invalid model %q", e.v)
			}
			n.Model = e.v
		case e.k == "macaddr":
			n.MAC = e.v
		case e.k == "bridge":
			if !bridgeRE.MatchString(e.v) {
				return netConf{}, fmt.Errorf("invalid bridge %q", e.v)
			}
			n.Bridge = e.v
		case e.k == "tag":
			t, err := strconv.Atoi(e.v)
			if err != nil || t < 1 || t > 4094 {
				return netConf{}, fmt.Errorf("tag %q is not 1-4094", e.v)
			}
			n.Tag = t
		case e.k == "firewall" || e.k == "link_down" || e.k == "mtu" || e.k == "queues" || e.k == "rate" || e.k == "trunks":
		default:
			return netConf{}, fmt.Errorf("unknown key %q", e.k)
		}
	}
	if n.Model == "" {
		return netConf{}, errors.New("no model")
	}
	if n.MAC != "" && !macRE.MatchString(n.MAC) {
		return netConf{}, fmt.Errorf("invalid MAC %q", n.MAC)
	}
	n.p = p
	return n, nil
}

// String is the value as qemu-server prints it: model=MAC, bridge, then the rest by key.
func (n netConf) String() string {
	out := propString{{n.Model, strings.ToUpper(n.MAC)}}
	if n.Bridge != "" {
		out = append(out, kv{"bridge", n.Bridge})
	}
	var rest propString
	for _, e := range n.p {
		if !netModels[e.k] && e.k != "model" && e.k != "macaddr" && e.k != "bridge" && e.k != "tag" {
			rest = append(rest, e)
		}
	}
	if n.Tag != 0 {
		rest = append(rest, kv{"tag", strconv.Itoa(n.Tag)})
	}
	slices.SortStableFunc(rest, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	return append(out, rest...).format("")
}

var deviceRE = regexp.MustCompile(`^(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|net([0-9]|[12][0-9]|3[01])|efidisk0|tpmstate0)$`)

// parseBoot parses a boot value: "order=scsi0;ide2;net0" (PVE ≥ 6.2) or the legacy letters
// "[acdn]{1,4}". It answers the order's devices; legacy values answer nil.
func parseBoot(s string) ([]string, error) {
	if legacyBootRE.MatchString(s) {
		return nil, nil
	}
	p, err := parsePropString(s, "legacy")
	if err != nil {
		return nil, err
	}
	var order []string
	for _, e := range p {
		switch e.k {
		case "order":
			if e.v == "" {
				return nil, nil
			}
			for _, d := range strings.Split(e.v, ";") {
				if !deviceRE.MatchString(d) {
					return nil, fmt.Errorf("invalid boot device %q", d)
				}
				for _, seen := range order {
					if seen == d {
						return nil, fmt.Errorf("device %q listed twice", d)
					}
				}
				order = append(order, d)
			}
		case "legacy":
			if !legacyBootRE.MatchString(e.v) {
				return nil, fmt.Errorf("invalid legacy boot %q", e.v)
			}
		default:
			return nil, fmt.Errorf("unknown key %q", e.k)
		}
	}
	return order, nil
}

var legacyBootRE = regexp.MustCompile(`^[acdn]{1,4}$`)

// driveConf is a parsed disk or cdrom value.
type driveConf struct {
	Volume string // "storage:volname", "none" or "cdrom"
	Media  string // "disk" (absent) or "cdrom"
	Size   int64  // bytes; 0 when absent
	p      propString
}

var volumeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9\-_.]*[a-zA-Z0-9]:[^\s,:]*[^\s,]+$`)

// parseDrive parses a drive value, e.g. "local-lvm:vm-100-disk-0,size=3G" or
// "proxy-seeds:iso/x-seed.iso,media=cdrom".
func parseDrive(s string) (driveConf, error) {
	p, err := parsePropString(s, "file")
	if err != nil {
		return driveConf{}, err
	}
	var d driveConf
	for _, e := range p {
		switch e.k {
		case "file":
			d.Volume = e.v
		case "media":
			if e.v != "disk" && e.v != "cdrom" {
				return driveConf{}, fmt.Errorf("invalid media %q", e.v)
			}
			d.Media = e.v
		case "size":
			n, err := parseSize(e.v)
			if err != nil {
				return driveConf{}, err
			}
			d.Size = n
		}
	}
	switch {
	case d.Volume == "":
		return driveConf{}, errors.New("no volume")
	case d.Volume == "none" || d.Volume == "cdrom":
		if d.Media != "cdrom" {
			return driveConf{}, fmt.Errorf("%s is only a cdrom", d.Volume)
		}
	case !volumeRE.MatchString(d.Volume):
		return driveConf{}, fmt.Errorf("invalid volume %q", d.Volume)
	}
	d.p = p
	return d, nil
}

// storage is the volume's storage ID ("" for none/cdrom).
func (d driveConf) storage() string {
	s, _, _ := strings.Cut(d.Volume, ":")
	if d.Volume == "none" || d.Volume == "cdrom" {
		return ""
	}
	return s
}

func (d driveConf) String() string {
	p := append(propString(nil), d.p...)
	if d.Size > 0 {
		p.set("size", formatSize(d.Size))
	}
	return p.format("file")
}

var sizeRE = regexp.MustCompile(`^(\d+(?:\.\d+)?)([KMGT])?$`)

// parseSize reads a disk size as qemu-server does: a number with an optional K/M/G/T unit
// (binary), bytes without.
func parseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("unable to parse size '%s'", s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("unable to parse size '%s'", s)
	}
	mult := map[string]float64{"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[2]]
	v := f * mult
	if v > 1<<50 {
		return 0, fmt.Errorf("size '%s' too large", s)
	}
	return int64(v), nil
}

// formatSize is PVE::QemuServer::Drive::format_size: the largest unit that divides exactly.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
