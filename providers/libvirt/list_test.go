package libvirt

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/egressd/egressd/providers"
)

func TestDeleteRemovesWhatIsLeft(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	inst := mustCreate(t, p, testRequest(name, "u1"))

	// Volumes without their domain, as a Delete cut off after undefine leaves them.
	cloud.with(func(f *fakeCloud) { delete(f.hosts["h1"].domains, name) })
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Fatal(err)
	}
	if vols := cloud.volumes("h1"); slices.Contains(vols, overlayVolume(name)) || slices.Contains(vols, seedVolume(name)) {
		t.Errorf("volumes left: %v", vols)
	}
	if err := p.Delete(context.Background(), inst.ID); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	_, err := p.Get(context.Background(), inst.ID)
	wantClass(t, "Get after Delete", err, providers.ErrNotFound)
	err = p.Delete(context.Background(), idOf("h7", name))
	wantClass(t, "Delete on a host not in the config", err, providers.ErrPermanent)
}

func TestLeftovers(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	live := providers.InstanceName(testInstallation, "live")
	mustCreate(t, p, testRequest(live, "live"))
	orphan := providers.InstanceName(testInstallation, "orphan")
	cloud.crashAt = func(method, object string) bool { return method == "CreateVolume" && object == overlayVolume(orphan) }
	crashed := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	if _, err := crashed.Create(context.Background(), testRequest(orphan, "orphan")); err == nil {
		t.Fatal("the killed Create succeeded")
	}
	cloud.crashAt = nil
	cloud.with(func(f *fakeCloud) {
		f.hosts["h1"].pools["default"].vols["someones-disk.qcow2"] = &fakeVol{name: "someones-disk.qcow2"}
	})

	left, err := p.Leftovers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Name != orphan || left[0].ID != idOf("h1", orphan) ||
		!slices.Equal(left[0].Parts, []string{overlayVolume(orphan)}) || time.Since(left[0].ModifiedAt) > time.Minute {
		t.Fatalf("Leftovers = %+v, want the orphan's overlay only", left)
	}
	if err := p.Delete(context.Background(), left[0].ID); err != nil {
		t.Fatal(err)
	}
	if left, _ := p.Leftovers(context.Background()); len(left) != 0 {
		t.Errorf("Leftovers after Delete = %+v", left)
	}
}

func TestListFailsWholeWhenAHostCannotBeRead(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud("h1", "h2")
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha(), "h1", "h2"), nil, Hooks{})
	mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
	if list, err := p.List(context.Background()); err != nil || len(list) != 1 {
		t.Fatalf("List = %v, %v", list, err)
	}
	cloud.with(func(f *fakeCloud) { f.hosts["h2"].down = true })
	list, err := p.List(context.Background())
	wantClass(t, "List with a host down", err, providers.ErrTransient)
	if list != nil {
		t.Errorf("List returned a partial list %v", list)
	}
	// A link that dies in the middle of the listing is an error too, not a shorter list.
	cloud.with(func(f *fakeCloud) {
		f.hosts["h2"].down = false
		f.before = func(_ *fakeProc, method, _ string) error {
			if method == "DomainMetadata" {
				return errLinkDead
			}
			return nil
		}
	})
	_, err = p.List(context.Background())
	wantClass(t, "List with a link dying mid-list", err, providers.ErrTransient)
}

// A marker is the base's only warrant: a garbage one (a writer killed mid-upload) makes the
// base be fetched again; one with the digest alone still vouches for it, and libvirt's probe
// gives the virtual size.
func TestImageMarkers(t *testing.T) {
	img := newImageServer(t, testImage(20<<30, 64<<10))
	cfg := testConfig(img.URL+"/tiny.qcow2", img.sha())
	base := "base-lv-tiny.qcow2"
	for _, c := range []struct {
		name      string
		content   string
		badMarker bool
		refetched bool
	}{
		{"garbage", "not a digest\n", true, true},
		{"empty-ish", "\x00\x00", true, true},
		{"digest only", img.sha() + "\n", false, false},
		{"digest and size", fmt.Sprintf("%s %d\n", img.sha(), 20<<30), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cloud := newFakeCloud()
			p := newFakeProvider(t, cloud.proc(), cfg, nil, Hooks{})
			mustCreate(t, p, testRequest(providers.InstanceName(testInstallation, "u1"), "u1"))
			cloud.with(func(f *fakeCloud) {
				v := f.hosts["h1"].pools["default"].vols[base+".sha256"]
				v.data, v.capacity = []byte(c.content), uint64(len(c.content))
			})
			fetched := img.gets.Load()
			name := providers.InstanceName(testInstallation, "u2")
			_, err := p.Create(context.Background(), testRequest(name, "u2"))
			if c.badMarker {
				// The first instance's disk is backed by the base: it must not go.
				wantClass(t, "Create with a bad marker and a base in use", err, providers.ErrPermanent)
				if v := cloud.violations(); len(v) > 0 {
					t.Errorf("the fake saw: %v", v)
				}
				if err := p.Delete(context.Background(), idOf("h1", providers.InstanceName(testInstallation, "u1"))); err != nil {
					t.Fatal(err)
				}
				_, err = p.Create(context.Background(), testRequest(name, "u2"))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := img.gets.Load() > fetched; got != c.refetched {
				t.Errorf("refetched = %v, want %v", got, c.refetched)
			}
			if ov := cloud.volume("h1", overlayVolume(name)); ov.capacity != 20<<30 {
				t.Errorf("overlay capacity %d, want the image's virtual size", ov.capacity)
			}
		})
	}
}

// Two provider entries may share a host; each lists only its own domains.
func TestListKeepsToItsProviderEntry(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	a := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	b, err := build("other", testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	b.setDial(cloud.proc().dial)
	defer b.Close()
	mustCreate(t, a, testRequest(providers.InstanceName(testInstallation, "a"), "a"))
	mustCreate(t, b, testRequest(providers.InstanceName(testInstallation, "b"), "b"))
	for _, c := range []struct {
		p   *Provider
		uid string
	}{{a, "a"}, {b, "b"}} {
		list, err := c.p.List(context.Background())
		if err != nil || len(list) != 1 || list[0].Marks.UID != c.uid {
			t.Errorf("%s: List = %+v, %v; want only uid %s", c.p.name, list, err, c.uid)
		}
	}
	if vols := cloud.volumes("h1"); !slices.Contains(vols, "base-other-tiny.qcow2") || !slices.Contains(vols, "base-lv-tiny.qcow2") {
		t.Errorf("each entry has its own base: %v", vols)
	}
}
