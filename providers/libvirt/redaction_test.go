package libvirt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

// User-data and the proxy password reach the guest through the seed, and nowhere else: not a
// log line at debug level, not an error, not an Instance, not the catalog, not a progress event.
func TestSecretsStayOutOfLogsErrorsAndCatalog(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	var log providertest.LogBuffer
	var events bytes.Buffer
	hooks := Hooks{Progress: func(e ProgressEvent) { fmt.Fprintf(&events, "%+v\n", e) }}
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), log.Logger(), hooks)
	name := providers.InstanceName(testInstallation, "u1")
	req := testRequest(name, "u1")
	req.UserData = providers.UserData("#cloud-config\n# " + providertest.SentinelUserData + "\n")
	req.Auth = &providers.Auth{Username: "crawler", Password: providertest.SentinelPassword}

	var seen []string
	note := func(v any) { seen = append(seen, fmt.Sprintf("%v %+v %#v", v, v, v)) }
	inst, err := p.Create(context.Background(), req)
	note(inst)
	note(err)
	got, err := p.Get(context.Background(), inst.ID)
	note(got)
	note(err)
	list, err := p.List(context.Background())
	note(list)
	note(err)
	js, _ := json.Marshal(p.Catalog())
	seen = append(seen, string(js))

	// Failing paths: a foreign owner, a full pool, a broken request.
	_, err = p.Create(context.Background(), testRequest(name, "u2"))
	note(err)
	cloud.with(func(f *fakeCloud) { f.hosts["h1"].pools["default"].capacity = 1 << 20 })
	other := req
	other.Name, other.UID = providers.InstanceName(testInstallation, "u3"), "u3"
	_, err = p.Create(context.Background(), other)
	note(err)
	other.Port = 0
	_, err = p.Create(context.Background(), other)
	note(err)
	note(p.Delete(context.Background(), inst.ID))
	seen = append(seen, log.String(), events.String())

	for _, s := range seen {
		for _, secret := range []string{providertest.SentinelUserData, providertest.SentinelPassword} {
			if strings.Contains(s, secret) {
				t.Errorf("a secret leaked into: %.300s", s)
			}
		}
	}
	if !strings.Contains(log.String(), "userDataBytes=") {
		t.Errorf("the log does not say how much user-data there was (is debug logging on?)")
	}
}

// The seed is the one place user-data goes, byte for byte.
func TestUserDataReachesTheSeed(t *testing.T) {
	img := newImageServer(t, testImage(2<<30, 64<<10))
	cloud := newFakeCloud()
	p := newFakeProvider(t, cloud.proc(), testConfig(img.URL+"/tiny.qcow2", img.sha()), nil, Hooks{})
	name := providers.InstanceName(testInstallation, "u1")
	req := testRequest(name, "u1")
	req.UserData = providers.UserData("#!/bin/sh\n# " + providertest.SentinelUserData + "\n")
	mustCreate(t, p, req)
	files, label := readSeed(t, cloud.volume("h1", seedVolume(name)).data)
	if label != "cidata" || !bytes.Equal(files["user-data"], req.UserData) {
		t.Errorf("seed %q user-data %q", label, files["user-data"])
	}
}
