package proxmox

import (
	"fmt"
	"strconv"
	"strings"
)

// bootDisk is the disk the guest boots from (docs/providers/proxmox.md, Create step 5): the first entry of
// `boot: order=` that is neither a NIC nor the ide2 cdrom (attaching the seed appends ide2 to
// the order, F19), else `bootdisk`, else the first of scsi0, virtio0, sata0, ide0 present.
func bootDisk(cfg vmConfig) (string, error) {
	for _, opt := range strings.Split(cfg["boot"], ",") {
		order, ok := strings.CutPrefix(strings.TrimSpace(opt), "order=")
		if !ok {
			continue
		}
		for _, dev := range strings.Split(order, ";") {
			dev = strings.TrimSpace(dev)
			if dev == "" || strings.HasPrefix(dev, "net") || dev == "ide2" || isCDROM(cfg[dev]) {
				continue
			}
			if cfg[dev] != "" {
				return dev, nil
			}
		}
	}
	if d := cfg["bootdisk"]; d != "" && cfg[d] != "" {
		return d, nil
	}
	for _, d := range []string{"scsi0", "virtio0", "sata0", "ide0"} {
		if cfg[d] != "" && !isCDROM(cfg[d]) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: the template has no disk in boot order=, bootdisk, scsi0, virtio0, sata0 or ide0", errNoBootDisk)
}

func isCDROM(drive string) bool { return strings.Contains(drive, "media=cdrom") }

// diskGiB is the size= of a drive (e.g. "local-lvm:vm-100-disk-0,size=3G") in GiB, rounded
// down; 0 when absent or unreadable, so that a resize is tried (a same-size resize is a
// no-op, F20).
func diskGiB(drive string) int {
	for _, opt := range strings.Split(drive, ",") {
		v, ok := strings.CutPrefix(opt, "size=")
		if !ok || v == "" {
			continue
		}
		mult := 1.0
		switch v[len(v)-1] {
		case 'T':
			mult, v = 1024, v[:len(v)-1]
		case 'G':
			v = v[:len(v)-1]
		case 'M':
			mult, v = 1.0/1024, v[:len(v)-1]
		case 'K':
			mult, v = 1.0/(1024*1024), v[:len(v)-1]
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0
		}
		return int(f * mult)
	}
	return 0
}

// rewriteNet sets bridge= and/or tag= on a net0 value, keeping the model=MAC and every other
// option (the MAC must survive: the guest's DHCP lease and the agent's NIC follow it).
func rewriteNet(net0, bridge string, vlan int) (string, error) {
	if net0 == "" {
		return "", fmt.Errorf("%w: the template has no net0 to put on bridge/vlanTag", errBadRequest)
	}
	opts := strings.Split(net0, ",")
	setBridge, setTag := bridge == "", vlan == 0
	for i, opt := range opts {
		k, _, _ := strings.Cut(opt, "=")
		switch {
		case k == "bridge" && bridge != "":
			opts[i], setBridge = "bridge="+bridge, true
		case k == "tag" && vlan != 0:
			opts[i], setTag = "tag="+strconv.Itoa(vlan), true
		}
	}
	if !setBridge {
		opts = append(opts, "bridge="+bridge)
	}
	if !setTag {
		opts = append(opts, "tag="+strconv.Itoa(vlan))
	}
	return strings.Join(opts, ","), nil
}

// macOf is the MAC of a net0 value, lowercased: "virtio=BC:24:11:…,bridge=vmbr0" as PVE
// writes it, or "model=virtio,macaddr=BC:24:11:…" as it also accepts.
func macOf(net0 string) string {
	for _, opt := range strings.Split(net0, ",") {
		k, v, ok := strings.Cut(opt, "=")
		if ok && k != "bridge" && k != "tag" && strings.Count(v, ":") == 5 && len(v) == 17 {
			return strings.ToLower(v)
		}
	}
	return ""
}
