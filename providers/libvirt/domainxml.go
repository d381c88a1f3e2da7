package libvirt

import (
	"encoding/xml"
	"fmt"
)

// The domain and volume documents are built from structs with encoding/xml, so that no value
// (a proxy name, a path, a bridge) can inject markup.

type domainDoc struct {
	XMLName    xml.Name     `xml:"domain"`
	Type       string       `xml:"type,attr"`
	Name       string       `xml:"name"`
	Metadata   domainMeta   `xml:"metadata"`
	Memory     sizeElem     `xml:"memory"`
	VCPU       int          `xml:"vcpu"`
	OS         osElem       `xml:"os"`
	Features   featureElems `xml:"features"`
	CPU        *cpuElem     `xml:"cpu,omitempty"`
	Clock      clockElem    `xml:"clock"`
	OnPoweroff string       `xml:"on_poweroff"`
	OnReboot   string       `xml:"on_reboot"`
	OnCrash    string       `xml:"on_crash"`
	Devices    devicesElem  `xml:"devices"`
}

type domainMeta struct {
	Instance metadataElement `xml:"https://github.com/egressd/egressd/providers/libvirt/v1 instance"`
}

type sizeElem struct {
	Unit  string `xml:"unit,attr"`
	Value uint64 `xml:",chardata"`
}

type osElem struct {
	Firmware string        `xml:"firmware,attr,omitempty"`
	Type     osTypeElem    `xml:"type"`
	Loader   *firmwareElem `xml:"firmware,omitempty"`
	Boot     attrDev       `xml:"boot"`
}

type osTypeElem struct {
	Arch    string `xml:"arch,attr"`
	Machine string `xml:"machine,attr"`
	Value   string `xml:",chardata"`
}

type firmwareElem struct {
	Features []firmwareFeature `xml:"feature"`
}

type firmwareFeature struct {
	Enabled string `xml:"enabled,attr"`
	Name    string `xml:"name,attr"`
}

type attrDev struct {
	Dev string `xml:"dev,attr"`
}

type featureElems struct {
	ACPI struct{} `xml:"acpi"`
	APIC struct{} `xml:"apic"`
}

type cpuElem struct {
	Mode string `xml:"mode,attr"`
}

type clockElem struct {
	Offset string `xml:"offset,attr"`
}

type devicesElem struct {
	Disks      []diskElem  `xml:"disk"`
	Interfaces []ifaceElem `xml:"interface"`
	Channel    channelElem `xml:"channel"`
	Serial     serialElem  `xml:"serial"`
	RNG        rngElem     `xml:"rng"`
	Balloon    balloonElem `xml:"memballoon"`
}

type diskElem struct {
	Type     string    `xml:"type,attr"`
	Device   string    `xml:"device,attr"`
	Driver   driver    `xml:"driver"`
	Source   fileSrc   `xml:"source"`
	Target   target    `xml:"target"`
	ReadOnly *struct{} `xml:"readonly,omitempty"`
}

type driver struct {
	Name string `xml:"name,attr"`
	Type string `xml:"type,attr"`
}

type fileSrc struct {
	File string `xml:"file,attr"`
}

type target struct {
	Dev string `xml:"dev,attr"`
	Bus string `xml:"bus,attr"`
}

type ifaceElem struct {
	Type   string      `xml:"type,attr"`
	MAC    macElem     `xml:"mac"`
	Source ifaceSource `xml:"source"`
	Model  modelElem   `xml:"model"`
}

type macElem struct {
	Address string `xml:"address,attr"`
}

type ifaceSource struct {
	Network string `xml:"network,attr,omitempty"`
	Bridge  string `xml:"bridge,attr,omitempty"`
}

type modelElem struct {
	Type string `xml:"type,attr"`
}

type channelElem struct {
	Type   string        `xml:"type,attr"`
	Target channelTarget `xml:"target"`
}

type channelTarget struct {
	Type string `xml:"type,attr"`
	Name string `xml:"name,attr"`
}

type serialElem struct {
	Type   string     `xml:"type,attr"`
	Source serialPath `xml:"source"`
	Target serialPort `xml:"target"`
}

type serialPath struct {
	Path string `xml:"path,attr"`
}

type serialPort struct {
	Port int `xml:"port,attr"`
}

type rngElem struct {
	Model   string     `xml:"model,attr"`
	Backend rngBackend `xml:"backend"`
}

type rngBackend struct {
	Model string `xml:"model,attr"`
	Value string `xml:",chardata"`
}

type balloonElem struct {
	Model string `xml:"model,attr"`
}

// domainSpec is what a domain is made of.
type domainSpec struct {
	Name        string
	DomainType  string // kvm or qemu
	VCPUs       int
	MemoryMiB   int
	Firmware    string // uefi or bios
	OverlayPath string
	SeedPath    string
	Host        HostConfig
	Marks       marks
}

// guestAgentChannel is the virtio-serial port qemu-guest-agent listens on; libvirt picks the
// host side's socket path itself.
const guestAgentChannel = "org.qemu.guest_agent.0"

// serialLogDir is where the serial console is written on the host: libvirt's own QEMU log
// directory, which its security drivers already allow.
const serialLogDir = "/var/log/libvirt/qemu"

// domainXML builds the domain. Machine type pc, not q35: the Debian cloud kernel has no AHCI,
// so the seed is an IDE cdrom. Disks are type=file with the pool's paths (AppArmor on stock
// Debian and Ubuntu denies volume-type disks).
func domainXML(s domainSpec) (string, error) {
	d := domainDoc{
		Type:       s.DomainType,
		Name:       s.Name,
		Metadata:   domainMeta{Instance: metadataElement{marks: s.Marks}},
		Memory:     sizeElem{Unit: "MiB", Value: uint64(s.MemoryMiB)},
		VCPU:       s.VCPUs,
		OS:         osElem{Type: osTypeElem{Arch: "x86_64", Machine: "pc", Value: "hvm"}, Boot: attrDev{Dev: "hd"}},
		Clock:      clockElem{Offset: "utc"},
		OnPoweroff: "destroy",
		OnReboot:   "restart",
		OnCrash:    "destroy",
		Devices: devicesElem{
			Disks: []diskElem{
				{Type: "file", Device: "disk", Driver: driver{Name: "qemu", Type: formatQCOW2},
					Source: fileSrc{File: s.OverlayPath}, Target: target{Dev: "vda", Bus: "virtio"}},
				{Type: "file", Device: "cdrom", Driver: driver{Name: "qemu", Type: formatRaw},
					Source: fileSrc{File: s.SeedPath}, Target: target{Dev: "hdc", Bus: "ide"}, ReadOnly: &struct{}{}},
			},
			Interfaces: []ifaceElem{nic(s.Host, s.Marks.MAC)},
			Channel:    channelElem{Type: "unix", Target: channelTarget{Type: "virtio", Name: guestAgentChannel}},
			Serial: serialElem{Type: "file", Source: serialPath{Path: fmt.Sprintf("%s/%s-serial.log", serialLogDir, s.Name)},
				Target: serialPort{Port: 0}},
			RNG:     rngElem{Model: "virtio", Backend: rngBackend{Model: "random", Value: "/dev/urandom"}},
			Balloon: balloonElem{Model: "none"},
		},
	}
	if s.DomainType == domainTypeKVM {
		// TCG cannot pass the host CPU through; its default model boots any x86_64 guest.
		d.CPU = &cpuElem{Mode: "host-passthrough"}
	}
	if s.Firmware == firmwareUEFI {
		d.OS.Firmware = "efi"
		d.OS.Loader = &firmwareElem{Features: []firmwareFeature{{Enabled: "no", Name: "secure-boot"}}}
	}
	b, err := xml.MarshalIndent(d, "", "  ")
	if err != nil {
		return "", fmt.Errorf("domain XML: %w", err)
	}
	return string(b), nil
}

func nic(h HostConfig, mac string) ifaceElem {
	n := ifaceElem{MAC: macElem{Address: mac}, Model: modelElem{Type: "virtio"}}
	if h.Network != "" {
		n.Type, n.Source.Network = "network", h.Network
	} else {
		n.Type, n.Source.Bridge = "bridge", h.Bridge
	}
	return n
}

type volumeDoc struct {
	XMLName  xml.Name      `xml:"volume"`
	Name     string        `xml:"name"`
	Capacity sizeElem      `xml:"capacity"`
	Target   volumeTarget  `xml:"target"`
	Backing  *backingStore `xml:"backingStore,omitempty"`
}

type volumeTarget struct {
	Format formatElem `xml:"format"`
}

type formatElem struct {
	Type string `xml:"type,attr"`
}

type backingStore struct {
	Path   string     `xml:"path"`
	Format formatElem `xml:"format"`
}

// volumeXML describes a volume of capacity bytes; with a backing path, a qcow2 overlay of it.
func volumeXML(name, format string, capacity uint64, backingPath, backingFormat string) string {
	v := volumeDoc{Name: name, Capacity: sizeElem{Unit: "bytes", Value: capacity}, Target: volumeTarget{Format: formatElem{Type: format}}}
	if backingPath != "" {
		v.Backing = &backingStore{Path: backingPath, Format: formatElem{Type: backingFormat}}
	}
	b, _ := xml.Marshal(v) // plain strings and numbers: cannot fail
	return string(b)
}
