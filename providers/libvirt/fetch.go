package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// maxImageBytes bounds a download: past it a URL serves something other than a disk image.
const maxImageBytes = 256 << 30

// download is a base image fetched to a local file and verified: go-libvirt is only ever
// handed this file, never the HTTP body, whose failure mid-stream would wedge its stream
// sender (H2).
type download struct {
	file        *os.File
	size        int64
	digest      string
	virtualSize uint64
}

func (d *download) remove() {
	d.file.Close()
	os.Remove(d.file.Name())
}

// download fetches img.URL into a temp file in DownloadDir, hashing it on the way, and checks
// the digest and the image header. HTTP 429 and 5xx, a broken or short body and local I/O
// errors are Transient; other 4xx, a digest mismatch and a wrong format are Permanent.
func (p *Provider) download(ctx context.Context, img ImageConfig, progress progressFunc) (*download, error) {
	where := redactURL(img.URL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, img.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errImageRejected, where, err)
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := p.http.Do(req)
	if err != nil {
		// The client's error quotes the full URL, which may carry a token.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%w: GET %s: %w", errImageFetch, where, err)
	}
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
	case code == http.StatusTooManyRequests || code >= 500:
		return nil, fmt.Errorf("%w: GET %s: HTTP %s", errImageFetch, where, resp.Status)
	case code >= 400:
		return nil, fmt.Errorf("%w: GET %s: HTTP %s", errImageRejected, where, resp.Status)
	default:
		return nil, fmt.Errorf("%w: GET %s: unexpected HTTP %s", errImageFetch, where, resp.Status)
	}
	total := resp.ContentLength // -1 when unknown
	if total > maxImageBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than any disk image egressd takes (%d)", errImageRejected, where, total, int64(maxImageBytes))
	}
	f, err := os.CreateTemp(p.cfg.DownloadDir, "egressd-image-*")
	if err != nil {
		return nil, fmt.Errorf("%w: downloadDir: %w", errLocal, err)
	}
	d := &download{file: f}
	ok := false
	defer func() {
		if !ok {
			d.remove()
		}
	}()
	sum := sha256.New()
	body := &countingReader{r: io.LimitReader(resp.Body, maxImageBytes+1), report: func(n int64) { progress(PhaseDownload, n, total) }}
	progress(PhaseDownload, 0, total)
	n, err := io.Copy(io.MultiWriter(f, sum), body)
	switch {
	case err != nil && body.err != nil:
		return nil, fmt.Errorf("%w: GET %s: the body broke off after %d bytes: %w", errImageFetch, where, n, err)
	case err != nil:
		return nil, fmt.Errorf("%w: writing the image to downloadDir: %w", errLocal, err)
	case n > maxImageBytes:
		return nil, fmt.Errorf("%w: %s is more than %d bytes", errImageRejected, where, int64(maxImageBytes))
	case total >= 0 && n != total:
		return nil, fmt.Errorf("%w: GET %s: got %d of %d bytes", errImageFetch, where, n, total)
	case n == 0:
		return nil, fmt.Errorf("%w: %s is empty", errImageRejected, where)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("%w: writing the image to downloadDir: %w", errLocal, err)
	}
	progress(PhaseDownload, n, n)
	d.size, d.digest = n, hex.EncodeToString(sum.Sum(nil))
	if img.SHA256 != "" && d.digest != img.SHA256 {
		return nil, fmt.Errorf("%w: %s has sha256 %s, the config says %s", errImageRejected, where, d.digest, img.SHA256)
	}
	if d.virtualSize, err = virtualSize(f, img.Format, n); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errImageRejected, where, err)
	}
	ok = true
	return d, nil
}

// qcow2Magic starts every qcow2 file.
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// virtualSize reads the disk size the image gives its guest: the qcow2 header's size field
// (bytes 24-31), or the file size of a raw image. It also refuses an image whose content
// contradicts its configured format, and a qcow2 that has a backing file of its own (it would
// name a path on somebody else's machine).
func virtualSize(f *os.File, format string, size int64) (uint64, error) {
	head := make([]byte, 32)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("reading the image header: %w", err)
	}
	isQCOW2 := n >= 32 && string(head[:4]) == string(qcow2Magic)
	switch {
	case format == formatQCOW2 && !isQCOW2:
		return 0, errors.New("the image is not qcow2 (set its format: raw if it is a raw disk)")
	case format == formatRaw && isQCOW2:
		return 0, errors.New("the image is qcow2, not raw (set its format: qcow2)")
	case format == formatRaw:
		return uint64(size), nil
	}
	if binary.BigEndian.Uint64(head[8:16]) != 0 {
		return 0, errors.New("the qcow2 image has a backing file of its own; flatten it first (qemu-img convert)")
	}
	return binary.BigEndian.Uint64(head[24:32]), nil
}

// redactURL is a URL fit for logs and errors: no user info, query or fragment, which may hold
// credentials or signed tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// progressFunc reports a transfer's progress; total is -1 while unknown.
type progressFunc func(phase string, done, total int64)

// progressEvery throttles progress reports per transfer.
const progressEvery = time.Second

// progress returns the reporter for one image on one host: Hooks.Progress at most once per
// progressEvery, plus every phase's first and last report.
func (p *Provider) progress(host, key string) progressFunc {
	if p.hooks.Progress == nil {
		return func(string, int64, int64) {}
	}
	var (
		mu    sync.Mutex
		last  time.Time
		phase string
	)
	return func(ph string, done, total int64) {
		mu.Lock()
		now := time.Now()
		report := ph != phase || done == total || done == 0 || now.Sub(last) >= progressEvery
		if report {
			phase, last = ph, now
		}
		mu.Unlock()
		if report {
			p.hooks.Progress(ProgressEvent{Provider: p.name, Host: host, Image: key, Phase: ph, Done: done, Total: total})
		}
	}
}

// countingReader counts what passes and remembers a read error, to tell a broken source from
// a failed destination.
type countingReader struct {
	r      io.Reader
	n      int64
	err    error
	report func(int64)
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	if n > 0 && c.report != nil {
		c.report(c.n)
	}
	return n, err
}
