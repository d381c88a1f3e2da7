package libvirt

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

func (c *fakeConn) LookupDomain(ctx context.Context, name string) (golibvirt.Domain, error) {
	if err := c.enter(ctx, "LookupDomain", name); err != nil {
		return golibvirt.Domain{}, err
	}
	d, err := c.dom(golibvirt.Domain{Name: name})
	if err != nil {
		return golibvirt.Domain{}, c.leave("LookupDomain", name, err)
	}
	return golibvirt.Domain{Name: name, UUID: d.uuid, ID: -1}, c.leave("LookupDomain", name, nil)
}

type fakeDomDoc struct {
	Type     string `xml:"type,attr"`
	Name     string `xml:"name"`
	Metadata struct {
		Inner []byte `xml:",innerxml"`
	} `xml:"metadata"`
	Disks []struct {
		Source struct {
			File string `xml:"file,attr"`
		} `xml:"source"`
	} `xml:"devices>disk"`
	Interfaces []struct {
		MAC struct {
			Address string `xml:"address,attr"`
		} `xml:"mac"`
		Source struct {
			Network string `xml:"network,attr"`
		} `xml:"source"`
	} `xml:"devices>interface"`
}

// parseFakeMetadata splits <metadata> into its elements by namespace and prints each
// without its xmlns, as libvirt's DomainGetMetadata does.
func parseFakeMetadata(inner []byte) (map[string]string, error) {
	out := map[string]string{}
	d := xml.NewDecoder(bytes.NewReader(inner))
	for {
		off := d.InputOffset()
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if se.Name.Space == "" {
			return nil, errors.New("metadata element without a namespace")
		}
		if err := d.Skip(); err != nil {
			return nil, err
		}
		raw := string(inner[off:d.InputOffset()])
		out[se.Name.Space] = strings.Replace(raw, ` xmlns="`+se.Name.Space+`"`, "", 1)
	}
}

func (c *fakeConn) DefineDomain(ctx context.Context, doc string) (golibvirt.Domain, error) {
	var d fakeDomDoc
	if err := xml.Unmarshal([]byte(doc), &d); err != nil || d.Name == "" {
		return golibvirt.Domain{}, lverr(golibvirt.ErrXMLError, "bad domain XML: %v", err)
	}
	meta, err := parseFakeMetadata(d.Metadata.Inner)
	if err != nil {
		return golibvirt.Domain{}, lverr(golibvirt.ErrXMLError, "metadata: %v", err)
	}
	if err := c.enter(ctx, "DefineDomain", d.Name); err != nil {
		return golibvirt.Domain{}, err
	}
	fd := c.h().domains[d.Name]
	if fd == nil {
		fd = &fakeDomain{name: d.Name, state: golibvirt.DomainShutoff}
		rand.Read(fd.uuid[:])
		c.h().domains[d.Name] = fd
	}
	fd.meta = meta
	fd.disks = nil
	for _, disk := range d.Disks {
		fd.disks = append(fd.disks, disk.Source.File)
	}
	if len(d.Interfaces) > 0 {
		fd.mac, fd.network = d.Interfaces[0].MAC.Address, d.Interfaces[0].Source.Network
	}
	return golibvirt.Domain{Name: d.Name, UUID: fd.uuid, ID: -1}, c.leave("DefineDomain", d.Name, nil)
}

func (c *fakeConn) DomainState(ctx context.Context, dom golibvirt.Domain) (golibvirt.DomainState, error) {
	if err := c.enter(ctx, "DomainState", dom.Name); err != nil {
		return 0, err
	}
	d, err := c.dom(dom)
	if err != nil {
		return 0, c.leave("DomainState", dom.Name, err)
	}
	return d.state, c.leave("DomainState", dom.Name, nil)
}

func (c *fakeConn) DomainMetadata(ctx context.Context, dom golibvirt.Domain, ns string) (string, error) {
	if err := c.enter(ctx, "DomainMetadata", dom.Name); err != nil {
		return "", err
	}
	d, err := c.dom(dom)
	if err != nil {
		return "", c.leave("DomainMetadata", dom.Name, err)
	}
	raw, ok := d.meta[ns]
	if !ok {
		return "", c.leave("DomainMetadata", dom.Name, lverr(golibvirt.ErrNoDomainMetadata, "metadata not found: Requested metadata element is not present"))
	}
	return raw, c.leave("DomainMetadata", dom.Name, nil)
}

func (c *fakeConn) StartDomain(ctx context.Context, dom golibvirt.Domain) error {
	if err := c.enter(ctx, "StartDomain", dom.Name); err != nil {
		return err
	}
	d, err := c.dom(dom)
	switch {
	case err != nil:
	case d.state == golibvirt.DomainRunning:
		err = lverr(golibvirt.ErrOperationInvalid, "Requested operation is not valid: domain is already running")
	default:
		for _, disk := range d.disks {
			if !c.pathExists(disk) {
				err = lverr(golibvirt.ErrInternalError, "Cannot access storage file '%s': No such file or directory", disk)
			}
		}
		if err == nil && d.network != "" && c.h().networks[d.network] == nil {
			err = lverr(golibvirt.ErrNoNetwork, "Network not found: no network with matching name '%s'", d.network)
		}
		if err == nil {
			d.state = golibvirt.DomainRunning
			c.f.nextIP++
			ip := fmt.Sprintf("10.77.%d.%d", c.f.nextIP/250, c.f.nextIP%250+2)
			if n := c.h().networks[d.network]; n != nil {
				n.leases = append(n.leases, golibvirt.NetworkDhcpLease{Iface: "virbr0", Type: int32(golibvirt.IPAddrTypeIpv4),
					Mac: golibvirt.OptString{d.mac}, Ipaddr: ip, Prefix: 24, Expirytime: time.Now().Add(time.Hour).Unix()})
			}
		}
	}
	return c.leave("StartDomain", dom.Name, err)
}

func (c *fakeConn) DestroyDomain(ctx context.Context, dom golibvirt.Domain) error {
	if err := c.enter(ctx, "DestroyDomain", dom.Name); err != nil {
		return err
	}
	d, err := c.dom(dom)
	if err == nil {
		if d.state == golibvirt.DomainShutoff {
			err = lverr(golibvirt.ErrOperationInvalid, "Requested operation is not valid: domain is not running")
		}
		d.state = golibvirt.DomainShutoff
	}
	return c.leave("DestroyDomain", dom.Name, err)
}

func (c *fakeConn) UndefineDomain(ctx context.Context, dom golibvirt.Domain) error {
	if err := c.enter(ctx, "UndefineDomain", dom.Name); err != nil {
		return err
	}
	_, err := c.dom(dom)
	if err == nil {
		delete(c.h().domains, dom.Name)
	}
	return c.leave("UndefineDomain", dom.Name, err)
}

func (c *fakeConn) ListDomains(ctx context.Context) ([]golibvirt.Domain, error) {
	if err := c.enter(ctx, "ListDomains", ""); err != nil {
		return nil, err
	}
	var out []golibvirt.Domain
	for _, name := range sortedKeys(c.h().domains) {
		out = append(out, golibvirt.Domain{Name: name, UUID: c.h().domains[name].uuid, ID: -1})
	}
	return out, c.leave("ListDomains", "", nil)
}

func (c *fakeConn) AgentInterfaces(ctx context.Context, dom golibvirt.Domain) ([]golibvirt.DomainInterface, error) {
	if err := c.enter(ctx, "AgentInterfaces", dom.Name); err != nil {
		return nil, err
	}
	d, err := c.dom(dom)
	switch {
	case err != nil:
	case d.state != golibvirt.DomainRunning:
		err = lverr(golibvirt.ErrOperationInvalid, "domain is not running")
	case !c.h().agent:
		err = lverr(golibvirt.ErrAgentUnresponsive, "Guest agent is not responding: QEMU guest agent is not connected")
	}
	if err != nil {
		return nil, c.leave("AgentInterfaces", dom.Name, err)
	}
	ip := ""
	for _, n := range c.h().networks {
		if a := leaseAddress(n.leases, d.mac, time.Now()); a != "" {
			ip = a
		}
	}
	ifaces := []golibvirt.DomainInterface{
		{Name: "lo", Hwaddr: golibvirt.OptString{"00:00:00:00:00:00"}, Addrs: []golibvirt.DomainIPAddr{{Type: 0, Addr: "127.0.0.1", Prefix: 8}}},
		{Name: "docker0", Hwaddr: golibvirt.OptString{"02:42:ac:11:00:01"}, Addrs: []golibvirt.DomainIPAddr{{Type: 0, Addr: "172.17.0.1", Prefix: 16}}},
		{Name: "eth0", Hwaddr: golibvirt.OptString{strings.ToUpper(d.mac)}, Addrs: []golibvirt.DomainIPAddr{
			{Type: 1, Addr: "fe80::1", Prefix: 64}, {Type: 0, Addr: ip, Prefix: 24}}},
	}
	return ifaces, c.leave("AgentInterfaces", dom.Name, nil)
}

func (c *fakeConn) LookupNetwork(ctx context.Context, name string) (golibvirt.Network, error) {
	if err := c.enter(ctx, "LookupNetwork", name); err != nil {
		return golibvirt.Network{}, err
	}
	if c.h().networks[name] == nil {
		return golibvirt.Network{}, c.leave("LookupNetwork", name, lverr(golibvirt.ErrNoNetwork, "Network not found"))
	}
	return golibvirt.Network{Name: name}, c.leave("LookupNetwork", name, nil)
}

func (c *fakeConn) DHCPLeases(ctx context.Context, net golibvirt.Network, mac string) ([]golibvirt.NetworkDhcpLease, error) {
	if err := c.enter(ctx, "DHCPLeases", net.Name); err != nil {
		return nil, err
	}
	n := c.h().networks[net.Name]
	if n == nil {
		return nil, c.leave("DHCPLeases", net.Name, lverr(golibvirt.ErrNoNetwork, "Network not found"))
	}
	var out []golibvirt.NetworkDhcpLease
	for _, l := range n.leases {
		if mac == "" || strings.EqualFold(l.Mac[0], mac) {
			out = append(out, l)
		}
	}
	return out, c.leave("DHCPLeases", net.Name, nil)
}
