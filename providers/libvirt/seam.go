package libvirt

import (
	"context"
	"io"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// conn is the seam between the provider and libvirt: the calls it makes on one host. The real
// one (rpcConn) runs each go-libvirt call under ctx and a budget of its own; tests use an
// in-memory fake. Errors from libvirt itself are golibvirt.Error values, so that classify sees
// the same codes from both.
type conn interface {
	LibVersion(ctx context.Context) (uint64, error)
	Hostname(ctx context.Context) (string, error)

	LookupPool(ctx context.Context, name string) (golibvirt.StoragePool, error)
	PoolInfo(ctx context.Context, pool golibvirt.StoragePool) (poolInfo, error)
	RefreshPool(ctx context.Context, pool golibvirt.StoragePool) error
	ListVolumes(ctx context.Context, pool golibvirt.StoragePool) ([]golibvirt.StorageVol, error)

	LookupVolume(ctx context.Context, pool golibvirt.StoragePool, name string) (golibvirt.StorageVol, error)
	CreateVolume(ctx context.Context, pool golibvirt.StoragePool, xml string) (golibvirt.StorageVol, error)
	VolumeInfo(ctx context.Context, vol golibvirt.StorageVol) (volInfo, error)
	VolumePath(ctx context.Context, vol golibvirt.StorageVol) (string, error)
	VolumeXML(ctx context.Context, vol golibvirt.StorageVol) (string, error)
	// UploadVolume streams length bytes of r into vol. r must not fail mid-stream (H2): pass
	// a verified local file or a buffer.
	UploadVolume(ctx context.Context, vol golibvirt.StorageVol, r io.Reader, length uint64) error
	DownloadVolume(ctx context.Context, vol golibvirt.StorageVol, w io.Writer, length uint64) error
	DeleteVolume(ctx context.Context, vol golibvirt.StorageVol) error

	LookupDomain(ctx context.Context, name string) (golibvirt.Domain, error)
	DefineDomain(ctx context.Context, xml string) (golibvirt.Domain, error)
	DomainState(ctx context.Context, dom golibvirt.Domain) (golibvirt.DomainState, error)
	// DomainMetadata returns the <metadata> child in namespace ns, as libvirt prints it.
	DomainMetadata(ctx context.Context, dom golibvirt.Domain, ns string) (string, error)
	StartDomain(ctx context.Context, dom golibvirt.Domain) error
	DestroyDomain(ctx context.Context, dom golibvirt.Domain) error
	UndefineDomain(ctx context.Context, dom golibvirt.Domain) error
	ListDomains(ctx context.Context) ([]golibvirt.Domain, error)
	// AgentInterfaces asks the guest agent for the guest's interfaces and addresses.
	AgentInterfaces(ctx context.Context, dom golibvirt.Domain) ([]golibvirt.DomainInterface, error)

	LookupNetwork(ctx context.Context, name string) (golibvirt.Network, error)
	// DHCPLeases returns the network's leases, only those of mac when it is not empty.
	DHCPLeases(ctx context.Context, net golibvirt.Network, mac string) ([]golibvirt.NetworkDhcpLease, error)

	// Alive reports whether calls may still succeed; a dead conn is dropped and redialled.
	Alive() bool
	// Close releases the connection at once, without waiting on any call in flight.
	Close()
}

// poolInfo is StoragePoolGetInfo's answer.
type poolInfo struct {
	State                           golibvirt.StoragePoolState
	Capacity, Allocation, Available uint64
}

// volInfo is StorageVolGetInfo's answer; Capacity is the virtual size once the pool has been
// refreshed (libvirt probes the format then).
type volInfo struct {
	Capacity, Allocation uint64
}

// dialFunc opens a connection to one host. dedicated says the connection is for one caller
// only (an image transfer, a health check), so a cancelled call may close it outright.
type dialFunc func(ctx context.Context, h HostConfig, dedicated bool) (conn, error)
