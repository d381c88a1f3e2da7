package libvirt

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// The base image cache. Each provider entry keeps its own copy of each image on each host:
//
//	base-<provider>-<key>.<format>         the image, as downloaded
//	base-<provider>-<key>.<format>.sha256  the marker: "<sha256 hex> <virtual size>\n"
//
// The marker is written last, so a base without one is an upload that never finished and is
// fetched again. A base is never replaced under the overlays that use it (H4): when the
// configured digest no longer matches the marker, Create fails (Permanent) until the image
// gets a new key, or its proxies are deleted and the base is removed by hand (marker first).

// baseImage is a cached base, ready to be the backing file of overlays.
type baseImage struct {
	Path        string
	Format      string
	VirtualSize uint64
}

type imageNames struct{ base, marker string }

func (p *Provider) imageNames(key string) imageNames {
	base := fmt.Sprintf("base-%s-%s.%s", p.name, key, p.cfg.Images[key].Format)
	return imageNames{base: base, marker: base + ".sha256"}
}

// imageLockKey is the key of the cross-process lock for one image on one host.
func (p *Provider) imageLockKey(host, key string) string {
	return "image." + p.name + "." + host + "." + key
}

// ensureImage returns the host's cached base of image key, fetching it first if needed.
// Only one fetch of an image per host runs at a time: within this process by a keyed mutex,
// across processes by Hooks.Lock. Those who waited find the marker the first one wrote.
func (p *Provider) ensureImage(ctx context.Context, h *hostConns, c conn, pool golibvirt.StoragePool, key string) (baseImage, error) {
	img, n := p.cfg.Images[key], p.imageNames(key)
	// Outside the locks nothing is removed: a base without a marker may be an upload under way.
	if b, ok, err := p.cachedImage(ctx, c, pool, n, img, false); err != nil || ok {
		return b, err
	}
	// Waiting may last as long as another fetch does.
	lctx, cancel := context.WithTimeout(ctx, p.cfg.xfer)
	defer cancel()
	unlock, err := p.images.Lock(lctx, h.cfg.Name+"/"+n.base)
	if err != nil {
		return baseImage{}, fmt.Errorf("%w: waiting for the fetch of image %s on host %s: %w", errBusy, key, h.cfg.Name, err)
	}
	defer unlock()
	if p.hooks.Lock != nil {
		release, err := p.hooks.Lock(lctx, p.imageLockKey(h.cfg.Name, key))
		if err != nil {
			return baseImage{}, fmt.Errorf("%w: image lock for %s on host %s: %w", errBusy, key, h.cfg.Name, err)
		}
		defer release()
	}
	if b, ok, err := p.cachedImage(ctx, c, pool, n, img, true); err != nil || ok {
		return b, err
	}
	return p.fetchImage(ctx, h, c, pool, key, n)
}

// cachedImage reports whether the base and its marker are in the pool. With tidy (only under
// the image locks) it also removes what a failed fetch left: a base without a marker, a marker
// that does not parse, a marker without its base.
func (p *Provider) cachedImage(ctx context.Context, c conn, pool golibvirt.StoragePool, n imageNames, img ImageConfig, tidy bool) (baseImage, bool, error) {
	forget := func(names ...string) (baseImage, bool, error) {
		if !tidy {
			return baseImage{}, false, nil
		}
		if slices.Contains(names, n.base) {
			if err := p.baseUnused(ctx, c, pool, n); err != nil {
				return baseImage{}, false, err
			}
		}
		for _, name := range names {
			if err := discard(ctx, c, pool, name); err != nil {
				return baseImage{}, false, err
			}
		}
		return baseImage{}, false, nil
	}
	mvol, err := c.LookupVolume(ctx, pool, n.marker)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return forget(n.base)
	}
	if err != nil {
		return baseImage{}, false, err
	}
	mk, err := readMarker(ctx, c, mvol)
	if errors.Is(err, errBadMarker) {
		p.log.Warn("libvirt base image marker unreadable; fetching the image again", "volume", n.marker, "err", err)
		return forget(n.marker, n.base)
	}
	if err != nil {
		return baseImage{}, false, err
	}
	if img.SHA256 != "" && mk.digest != img.SHA256 {
		return baseImage{}, false, fmt.Errorf("%w: the cached base %s has sha256 %s, but the config now says %s; "+
			"egressd does not replace a base under the disks that use it: add the new image under a new key, "+
			"or delete the proxies using this one and remove %s, then %s, from the pool by hand",
			errDigestChanged, n.base, mk.digest, img.SHA256, n.marker, n.base)
	}
	bvol, err := c.LookupVolume(ctx, pool, n.base)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return forget(n.marker)
	}
	if err != nil {
		return baseImage{}, false, err
	}
	path, err := c.VolumePath(ctx, bvol)
	if err != nil {
		return baseImage{}, false, err
	}
	size := mk.virtualSize
	if size == 0 {
		// A marker with the digest alone (an older format): libvirt's own probe of the
		// base has the virtual size.
		info, err := c.VolumeInfo(ctx, bvol)
		if err != nil {
			return baseImage{}, false, err
		}
		size = info.Capacity
	}
	return baseImage{Path: path, Format: img.Format, VirtualSize: size}, true, nil
}

// fetchImage downloads the image to a local file and verifies it, then streams it into the
// pool over a connection of its own, then writes the marker.
func (p *Provider) fetchImage(ctx context.Context, h *hostConns, c conn, pool golibvirt.StoragePool, key string, n imageNames) (baseImage, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.xfer)
	defer cancel()
	img := p.cfg.Images[key]
	log := p.log.With("host", h.cfg.Name, "image", key, "volume", n.base)
	log.Info("libvirt fetching base image into host pool", "from", redactURL(img.URL))
	progress := p.progress(h.cfg.Name, key)
	dl, err := p.download(ctx, img, progress)
	if err != nil {
		return baseImage{}, err
	}
	defer dl.remove()
	if err := p.checkSpace(ctx, c, pool, h.cfg, uint64(dl.size)); err != nil {
		return baseImage{}, err
	}
	if err := discard(ctx, c, pool, n.base); err != nil {
		return baseImage{}, err
	}
	// Created raw, as plain bytes; libvirt probes the real format from the content.
	vol, err := c.CreateVolume(ctx, pool, volumeXML(n.base, formatRaw, uint64(dl.size), "", ""))
	if err != nil {
		return baseImage{}, err
	}
	if err := p.uploadImage(ctx, h, vol, dl, progress); err != nil {
		// The transfer's own connection is closed by now, so libvirtd has let go of the
		// volume. The removal must happen even when ctx has ended, within its own budget.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.rpc)
		defer rcancel()
		if rerr := discard(rctx, c, pool, n.base); rerr != nil {
			log.Warn("libvirt removing a failed base image upload", "err", rerr)
		}
		return baseImage{}, err
	}
	if err := writeMarker(ctx, c, pool, n.marker, dl.digest, dl.virtualSize); err != nil {
		return baseImage{}, err
	}
	path, err := c.VolumePath(ctx, vol)
	if err != nil {
		return baseImage{}, err
	}
	progress(PhaseCached, dl.size, dl.size)
	log.Info("libvirt base image cached", "bytes", dl.size, "virtualSize", dl.virtualSize, "sha256", dl.digest)
	return baseImage{Path: path, Format: img.Format, VirtualSize: dl.virtualSize}, nil
}

// uploadImage streams the verified file on a dedicated connection: a stalled transfer then
// holds up nothing else, and closing its link cannot cut another caller's call.
func (p *Provider) uploadImage(ctx context.Context, h *hostConns, vol golibvirt.StorageVol, dl *download, progress progressFunc) error {
	dc, err := h.fresh(ctx)
	if err != nil {
		return err
	}
	defer dc.Close()
	if _, err := dl.file.Seek(0, 0); err != nil {
		return fmt.Errorf("%w: rewinding the downloaded image: %w", errLocal, err)
	}
	r := &countingReader{r: dl.file, report: func(n int64) { progress(PhaseUpload, n, dl.size) }}
	progress(PhaseUpload, 0, dl.size)
	if err := dc.UploadVolume(ctx, vol, r, uint64(dl.size)); err != nil {
		return err
	}
	if r.n != dl.size {
		return fmt.Errorf("%w: uploaded %d of %d bytes", errImageFetch, r.n, dl.size)
	}
	progress(PhaseUpload, dl.size, dl.size)
	return nil
}

// marker is the content of a base's marker volume.
type marker struct {
	digest      string
	virtualSize uint64
}

var (
	errBadMarker   = errors.New("malformed image marker")
	markerPattern  = regexp.MustCompile(`^([0-9a-f]{64})(?: ([0-9]+))?$`)
	maxMarkerBytes = uint64(1 << 10)
)

func readMarker(ctx context.Context, c conn, vol golibvirt.StorageVol) (marker, error) {
	info, err := c.VolumeInfo(ctx, vol)
	if err != nil {
		return marker{}, err
	}
	if info.Capacity == 0 || info.Capacity > maxMarkerBytes {
		return marker{}, fmt.Errorf("%w: %s is %d bytes", errBadMarker, vol.Name, info.Capacity)
	}
	var buf bytes.Buffer
	if err := c.DownloadVolume(ctx, vol, &buf, info.Capacity); err != nil {
		return marker{}, err
	}
	text := strings.ToLower(strings.Trim(buf.String(), "\x00 \t\r\n"))
	m := markerPattern.FindStringSubmatch(text)
	if m == nil {
		return marker{}, fmt.Errorf("%w: %s does not hold \"<sha256> <virtual size>\"", errBadMarker, vol.Name)
	}
	mk := marker{digest: m[1]}
	if m[2] != "" {
		if mk.virtualSize, err = strconv.ParseUint(m[2], 10, 64); err != nil {
			return marker{}, fmt.Errorf("%w: %s: %v", errBadMarker, vol.Name, err)
		}
	}
	return mk, nil
}

// writeMarker writes the marker; if its upload fails, the marker volume goes again, so that
// no half-written marker vouches for a base.
func writeMarker(ctx context.Context, c conn, pool golibvirt.StoragePool, name, digest string, virtualSize uint64) error {
	content := []byte(fmt.Sprintf("%s %d\n", digest, virtualSize))
	if err := discard(ctx, c, pool, name); err != nil {
		return err
	}
	vol, err := c.CreateVolume(ctx, pool, volumeXML(name, formatRaw, uint64(len(content)), "", ""))
	if err != nil {
		return err
	}
	if err := c.UploadVolume(ctx, vol, bytes.NewReader(content), uint64(len(content))); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultRPC)
		defer cancel()
		_ = c.DeleteVolume(rctx, vol)
		return err
	}
	return nil
}

// baseUnused makes sure no overlay is backed by a base about to be removed for want of a
// valid marker: that only happens when someone edited the pool by hand, and removing the base
// would take the disks of running proxies with it (H4).
func (p *Provider) baseUnused(ctx context.Context, c conn, pool golibvirt.StoragePool, n imageNames) error {
	bvol, err := c.LookupVolume(ctx, pool, n.base)
	if isCode(err, golibvirt.ErrNoStorageVol) {
		return nil
	}
	if err != nil {
		return err
	}
	path, err := c.VolumePath(ctx, bvol)
	if err != nil {
		return err
	}
	vols, err := c.ListVolumes(ctx, pool)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if _, ok := instanceOfVolume(v.Name); !ok || !strings.HasSuffix(v.Name, ".qcow2") {
			continue
		}
		doc, err := c.VolumeXML(ctx, v)
		if err != nil {
			return err
		}
		if volumeBacking(doc) == path {
			return fmt.Errorf("%w: the base %s has no valid marker %s, but the disk %s uses it; "+
				"egressd will not remove it: restore the marker, or delete the proxies using it", errDigestChanged, n.base, n.marker, v.Name)
		}
	}
	return nil
}

// volumeBacking reads <backingStore><path> from a volume's XML.
func volumeBacking(doc string) string {
	var v struct {
		Path string `xml:"backingStore>path"`
	}
	if xml.Unmarshal([]byte(doc), &v) != nil {
		return ""
	}
	return v.Path
}
