package proxmox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
	"github.com/egressd/egressd/providers/proxmox/pvetest"
)

const sentinelSecret = "SENTINEL-TOKEN-5e1f0c2a"

// The API token (a sentinel secret), the user-data and the proxy password never reach a log
// line at debug level, an error, an Instance, a check's status or the catalog, on the happy
// path and on failing ones: a wrong token (401), a malformed token file, a node down (596),
// a foreign owner, a bad request.
func TestSecretsStayOutOfLogsErrorsAndStatus(t *testing.T) {
	sim := newSim(t, pvetest.Options{Tokens: []pvetest.Token{{ID: "egressd@pve!egressd", Secret: sentinelSecret}}})
	cfg := simConfig(t, sim)
	if !strings.Contains(sim.Token(), sentinelSecret) {
		t.Fatal("the simulator does not use the sentinel")
	}
	var log providertest.LogBuffer
	p := newTestProvider(t, cfg, log.Logger())
	name := providers.InstanceName(testInstallation, "u1")
	req := testRequest(name, "u1")
	req.UserData = providers.UserData("#cloud-config\n# " + providertest.SentinelUserData + "\n")
	req.Auth = &providers.Auth{Username: "crawler", Password: providertest.SentinelPassword}

	var seen []string
	note := func(v any) {
		b, _ := json.Marshal(v)
		seen = append(seen, fmt.Sprintf("%v %+v %#v %s", v, v, v, b))
	}
	ctx := context.Background()
	inst, err := p.Create(ctx, req)
	note(inst)
	note(err)
	got := settle(t, p, inst.ID)
	note(got)
	list, err := p.List(ctx)
	note(list)
	note(err)
	note(p.Check(ctx))
	note(p.Catalog())

	// Failing paths.
	_, err = p.Create(ctx, testRequest(name, "u2"))
	note(err)
	bad := req
	bad.Port = 0
	_, err = p.Create(ctx, bad)
	note(err)
	sim.SetNodeDown(testNode, pvetest.StatusTimedOut)
	_, err = p.Get(ctx, inst.ID)
	note(err)
	note(p.Check(ctx))
	sim.SetNodeDown(testNode, 0)
	os.WriteFile(cfg.TokenFile, []byte("egressd@pve!egressd=wrong-"+sentinelSecret[:8]+"\n"), 0o600)
	_, err = p.Get(ctx, inst.ID)
	note(err)
	note(p.Check(ctx))
	os.WriteFile(cfg.TokenFile, []byte(sentinelSecret+"\n"), 0o600) // no user, no '!': malformed
	_, err = p.Get(ctx, inst.ID)
	note(err)
	note(p.Check(ctx))
	os.WriteFile(cfg.TokenFile, []byte(sim.Token()+"\n"), 0o600)
	note(p.Delete(ctx, inst.ID))
	seen = append(seen, log.String())

	for _, s := range seen {
		for _, secret := range []string{sentinelSecret, providertest.SentinelUserData, providertest.SentinelPassword} {
			if strings.Contains(s, secret) {
				t.Errorf("a secret leaked into: %.400s", s)
			}
		}
	}
	if !strings.Contains(log.String(), `msg="proxmox api call"`) || !strings.Contains(log.String(), "userDataBytes") {
		t.Errorf("the debug log lacks the api call lines (is debug logging on?)")
	}
	if strings.Contains(log.String(), "PVEAPIToken") {
		t.Error("the log holds the token header")
	}
}
