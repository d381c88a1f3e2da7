package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/egressd/egressd/providers"
)

// A provisioner killed with -9 at any step of Create leaves the host half-done; a restarted
// one (a fresh provider object, nothing in memory) must converge to exactly one running
// domain and no stray volumes. The fake kills the process right after the step takes effect
// on the host: its result never arrives and none of its later calls (no clean-up) land.
func TestCreateResumesAfterKill(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cfg := testConfig(img.URL+"/tiny.qcow2", img.sha())
	name := providers.InstanceName(testInstallation, "u1")
	base := "base-lv-tiny.qcow2"
	for _, c := range []struct {
		step           string
		method, object string
	}{
		{"after the image upload", "UploadVolume", base},
		{"after the marker", "UploadVolume", base + ".sha256"},
		{"after the overlay", "CreateVolume", overlayVolume(name)},
		{"after the seed upload", "UploadVolume", seedVolume(name)},
		{"after define", "DefineDomain", name},
		{"after start", "StartDomain", name},
	} {
		t.Run(c.step, func(t *testing.T) {
			cloud := newFakeCloud()
			cloud.crashAt = func(method, object string) bool { return method == c.method && object == c.object }
			first := newFakeProvider(t, cloud.proc(), cfg, nil, Hooks{})
			req := testRequest(name, "u1")
			_, err := first.Create(context.Background(), req)
			if err == nil {
				t.Fatal("the killed Create succeeded")
			}
			wantClass(t, "killed Create", err, providers.ErrTransient)
			cloud.crashAt = nil

			second := newFakeProvider(t, cloud.proc(), cfg, nil, Hooks{})
			inst := mustCreate(t, second, req)
			if doms := cloud.domains("h1"); !slices.Equal(doms, []string{name}) {
				t.Errorf("domains after the restart: %v, want just %s", doms, name)
			}
			want := []string{base, base + ".sha256", overlayVolume(name), seedVolume(name)}
			slices.Sort(want)
			if vols := cloud.volumes("h1"); !slices.Equal(vols, want) {
				t.Errorf("volumes after the restart: %v, want %v", vols, want)
			}
			if d := cloud.domain("h1", name); d.state != golibvirt.DomainRunning {
				t.Errorf("domain state %v, want running", d.state)
			}
			got, err := second.Get(context.Background(), inst.ID)
			if err != nil || got.State != providers.StateRunning || got.Marks.UID != "u1" {
				t.Errorf("Get after the restart = %+v, %v", got, err)
			}
			if n := cloud.uploadsOf(base); n > 2 {
				t.Errorf("the base was uploaded %d times", n)
			}
			if v := cloud.violations(); len(v) > 0 {
				t.Errorf("the fake saw: %v", v)
			}
			// And a Delete then leaves nothing of the instance.
			if err := second.Delete(context.Background(), inst.ID); err != nil {
				t.Fatal(err)
			}
			if vols := cloud.volumes("h1"); !slices.Equal(vols, []string{base, base + ".sha256"}) {
				t.Errorf("volumes after Delete: %v, want only the cached base", vols)
			}
		})
	}
}

// sharedLock is a Hooks.Lock as a NATS KV lock would be: one per key across processes.
type sharedLock struct {
	keys  providers.KeyedMutex
	mu    sync.Mutex
	taken []string
}

func (l *sharedLock) lock(ctx context.Context, key string) (func(), error) {
	unlock, err := l.keys.Lock(ctx, key)
	if err == nil {
		l.mu.Lock()
		l.taken = append(l.taken, key)
		l.mu.Unlock()
	}
	return unlock, err
}

// Two provisioner processes creating proxies on one host with a cold image download it once
// and upload it once: the second waits on the shared lock and finds the marker.
func TestTwoProcessesFetchTheImageOnce(t *testing.T) {
	for _, c := range []struct {
		name       string
		shared     bool
		wantFetch  int64
		wantUpload int
	}{
		{"with Hooks.Lock", true, 1, 1},
		// Proves the test can see a double fetch: without the shared lock each process
		// fetches (and the two uploads may trip over each other, which only the lock prevents).
		{"without Hooks.Lock", false, 2, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := newImageServer(t, testImage(2<<30, 256<<10))
			img.setDelay(300 * time.Millisecond)
			cfg := testConfig(img.URL+"/tiny.qcow2", img.sha())
			cloud := newFakeCloud()
			lock := &sharedLock{}
			hooks := Hooks{}
			if c.shared {
				hooks.Lock = lock.lock
			}
			procs := []*Provider{
				newFakeProvider(t, cloud.proc(), cfg, nil, hooks),
				newFakeProvider(t, cloud.proc(), cfg, nil, hooks),
			}
			var wg sync.WaitGroup
			errs := make([]error, len(procs))
			for i, p := range procs {
				wg.Go(func() {
					uid := fmt.Sprintf("u%d", i)
					_, errs[i] = p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, uid), uid))
				})
			}
			wg.Wait()
			if n := img.gets.Load(); n != c.wantFetch {
				t.Errorf("image downloaded %d times, want %d", n, c.wantFetch)
			}
			if !c.shared {
				return
			}
			for i, err := range errs {
				if err != nil {
					t.Errorf("Create in process %d: %v", i, err)
				}
			}
			if n := cloud.uploadsOf("base-lv-tiny.qcow2"); n != c.wantUpload {
				t.Errorf("image uploaded %d times, want %d", n, c.wantUpload)
			}
			if !slices.Contains(lock.taken, "image.lv.h1.tiny") {
				t.Errorf("lock keys taken: %v, want image.lv.h1.tiny", lock.taken)
			}
			if n := len(cloud.domains("h1")); n != 2 {
				t.Errorf("%d domains, want 2", n)
			}
		})
	}
}

func TestProgressReportsDownloadUploadCached(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	var mu sync.Mutex
	var events []ProgressEvent
	hooks := Hooks{Progress: func(e ProgressEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }}
	p := newFakeProvider(t, newFakeCloud().proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, hooks)
	mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	mu.Lock()
	defer mu.Unlock()
	var phases []string
	for _, e := range events {
		if len(phases) == 0 || phases[len(phases)-1] != e.Phase {
			phases = append(phases, e.Phase)
		}
		if e.Host != "h1" || e.Image != "tiny" || e.Provider != "lv" {
			t.Errorf("event %+v", e)
		}
	}
	if !slices.Equal(phases, []string{PhaseDownload, PhaseUpload, PhaseCached}) {
		t.Errorf("phases %v", phases)
	}
	if last := events[len(events)-1]; last.Done != 64<<10 || last.Total != 64<<10 {
		t.Errorf("last event %+v", last)
	}
}

func TestAdoptionGuard(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	first := mustCreate(t, p, testRequest(name, "u1"))

	again := mustCreate(t, p, testRequest(name, "u1"))
	if again.ID != first.ID || !again.Marks.CreatedAt.Equal(first.Marks.CreatedAt) {
		t.Errorf("repeat Create = %+v, want the first %+v", again, first)
	}
	other := testRequest(name, "u2")
	_, err := p.Create(context.Background(), other)
	wantClass(t, "Create over another UID's domain", err, providers.ErrPermanent)
	if err != nil && !strings.Contains(err.Error(), `uid "u1"`) {
		t.Errorf("error does not name the owner: %v", err)
	}
	otherInst := testRequest(name, "u1")
	otherInst.Installation = "inst-other"
	_, err = p.Create(context.Background(), otherInst)
	wantClass(t, "Create over another installation's domain", err, providers.ErrPermanent)

	foreign := providers.InstanceName(testInstallation, "u3")
	cloud.with(func(f *fakeCloud) {
		f.hosts["h1"].domains[foreign] = &fakeDomain{name: foreign, state: golibvirt.DomainRunning, meta: map[string]string{}}
	})
	_, err = p.Create(context.Background(), testRequest(foreign, "u3"))
	wantClass(t, "Create over an unmarked domain", err, providers.ErrPermanent)
	err = p.Delete(context.Background(), idOf("h1", foreign))
	wantClass(t, "Delete of an unmarked domain", err, providers.ErrPermanent)
	if cloud.domain("h1", foreign) == nil {
		t.Error("Delete removed a domain egressd did not make")
	}
}

func TestCreateStartsAStoppedDomainAndRefusesAPausedOne(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	mustCreate(t, p, testRequest(name, "u1"))
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].domains[name].state = golibvirt.DomainShutoff })
	mustCreate(t, p, testRequest(name, "u1"))
	if d := cloud.domain("h1", name); d.state != golibvirt.DomainRunning {
		t.Errorf("state %v after Create of a shut-off domain", d.state)
	}
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].domains[name].state = golibvirt.DomainPaused })
	_, err := p.Create(context.Background(), testRequest(name, "u1"))
	wantClass(t, "Create of a paused domain", err, providers.ErrPermanent)
}

func TestQuotaBeforeAnyVolume(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].pools["default"].capacity = 5 << 30 })
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	_, err := p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	wantClass(t, "Create on a full pool", err, providers.ErrQuota)
	if vols := cloud.volumes("h1"); len(vols) != 0 {
		t.Errorf("volumes left: %v", vols)
	}
	if img.gets.Load() != 0 {
		t.Error("the image was fetched for a pool that cannot hold the instance")
	}

	// Room for the disk but not for the image as well: Quota after the download, nothing left.
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].pools["default"].capacity = 10<<30 + seedReserve + 32<<10 })
	p.cfg.reservePercent = 0
	_, err = p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	wantClass(t, "Create without room for the image", err, providers.ErrQuota)
	if vols := cloud.volumes("h1"); len(vols) != 0 {
		t.Errorf("volumes left: %v", vols)
	}

	cloud.with(func(f *fakeCloud) {
		f.hosts["h1"].pools["default"].capacity = 1 << 40
		f.hosts["h1"].pools["default"].state = golibvirt.StoragePoolInactive
	})
	_, err = p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	wantClass(t, "Create on an inactive pool", err, providers.ErrTransient)
}

// H4: a base image is never replaced under the overlays that use it.
func TestDigestChangeIsRefused(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))

	img.data = testImage(2<<30, 96<<10)
	changed := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	_, err := changed.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, "u2"), "u2"))
	wantClass(t, "Create after the image digest changed", err, providers.ErrPermanent)
	if !errors.Is(err, errDigestChanged) {
		t.Errorf("err = %v, want errDigestChanged", err)
	}
	if cloud.volume("h1", "base-lv-tiny.qcow2") == nil || cloud.uploadsOf("base-lv-tiny.qcow2") != 1 {
		t.Error("the base was replaced")
	}
	if v := cloud.violations(); len(v) > 0 {
		t.Errorf("the fake saw: %v", v)
	}
}

func TestImageDownloadFailures(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	for _, c := range []struct {
		name   string
		status int
		sha    string
		format string
		want   error
	}{
		{"server error", http.StatusBadGateway, img.sha(), "qcow2", providers.ErrTransient},
		{"rate limited", http.StatusTooManyRequests, img.sha(), "qcow2", providers.ErrTransient},
		{"not found", http.StatusNotFound, img.sha(), "qcow2", providers.ErrPermanent},
		{"digest mismatch", 0, strings.Repeat("ab", 32), "qcow2", providers.ErrPermanent},
		{"raw that is qcow2", 0, img.sha(), "raw", providers.ErrPermanent},
	} {
		t.Run(c.name, func(t *testing.T) {
			img.setFail(c.status)
			defer img.setFail(0)
			cfg := testConfig(img.URL+"/tiny.qcow2?token=SECRET-TOKEN", c.sha)
			cfg.Images["tiny"] = ImageConfig{URL: cfg.Images["tiny"].URL, SHA256: c.sha, Format: c.format}
			cloud := newFakeCloud()
			p := newFakeProvider(t, cloud.proc(), cfg, nil, Hooks{})
			_, err := p.Create(context.Background(), testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
			wantClass(t, "Create", err, c.want)
			if err != nil && strings.Contains(err.Error(), "SECRET-TOKEN") {
				t.Errorf("error quotes the URL's query: %v", err)
			}
			if vols := cloud.volumes("h1"); len(vols) != 0 {
				t.Errorf("volumes left: %v", vols)
			}
		})
	}
}

// The overlay must be at least the image's virtual size (a smaller one leaves the guest without
// its file system) and at least diskSizeGb.
func TestOverlayCapacity(t *testing.T) {
	for _, c := range []struct {
		virtual uint64
		diskGb  int
		want    uint64
	}{
		{2 << 30, 0, 10 << 30},
		{20 << 30, 10, 20 << 30},
		{2 << 30, 30, 30 << 30},
	} {
		img := newImageServer(t, testImage(c.virtual, 64<<10))
		cfg := testConfig(img.URL+"/tiny.qcow2", img.sha())
		cfg.DiskSizeGb = c.diskGb
		cloud := newFakeCloud()
		p := newFakeProvider(t, cloud.proc(), cfg, nil, Hooks{})
		name := providers.InstanceName(testInstallation, "u1")
		mustCreate(t, p, testRequest(name, "u1"))
		ov := cloud.volume("h1", overlayVolume(name))
		if ov.capacity != c.want || ov.format != "qcow2" || ov.backing != fakePoolPath+"/base-lv-tiny.qcow2" {
			t.Errorf("virtual %d, diskSizeGb %d: overlay %+v, want capacity %d backed by the base", c.virtual, c.diskGb, ov, c.want)
		}
	}
}

// Placement is checked before any dial, and each error names the field.
func TestPlacementIsCheckedBeforeAnyDial(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cfg := testConfig(img.URL+"/tiny.qcow2", img.sha(), "h1", "h2")
	cfg.Images["other"] = cfg.Images["tiny"]
	cloud := newFakeCloud("h1", "h2")
	proc := cloud.proc()
	p := newFakeProvider(t, proc, cfg, nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	for _, c := range []struct {
		field  string
		mutate func(*providers.CreateRequest)
	}{
		{"placement.zone", func(r *providers.CreateRequest) { r.Host = ""; r.Placement.Zone = "h9" }},
		{"host", func(r *providers.CreateRequest) { r.Host = "h9" }},
		{"placement.zone", func(r *providers.CreateRequest) { r.Host = "" }},
		{"placement.zone", func(r *providers.CreateRequest) { r.Placement.Zone = "h2" }},
		{"placement.machineType", func(r *providers.CreateRequest) { r.Placement.MachineType = "huge" }},
		{"placement.image", func(r *providers.CreateRequest) { r.Placement.Image = "gone" }},
		{"placement.image", func(r *providers.CreateRequest) { r.Placement.Image = "" }},
		{"placement.image", func(r *providers.CreateRequest) { r.Placement.Image = "https://example.com/x.qcow2" }},
	} {
		req := testRequest(name, "u1")
		req.Placement.Image = "tiny"
		c.mutate(&req)
		_, err := p.Create(context.Background(), req)
		wantClass(t, c.field, err, providers.ErrPermanent)
		if err != nil && !strings.Contains(err.Error(), c.field) {
			t.Errorf("error does not name %s: %v", c.field, err)
		}
	}
	if n := proc.dials.Load(); n != 0 {
		t.Errorf("%d dials for requests that cannot be served", n)
	}
	req := testRequest(name, "u1")
	req.Host, req.Placement = "", providers.Placement{Zone: "h2", Image: "other", MachineType: "small"}
	inst := mustCreate(t, p, req)
	if inst.ID != idOf("h2", name) || inst.Host != "h2" {
		t.Errorf("placed on %s (%s), want h2", inst.Host, inst.ID)
	}
}
