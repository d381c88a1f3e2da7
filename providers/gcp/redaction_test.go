package gcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/gcp/gcptest"
	"github.com/egressd/egressd/providers/providertest"
)

// The credential file (its key ID and private key), the access token it is exchanged for,
// user-data and the proxy password reach the service and the VM, and nowhere else: not a
// log line at debug level, not an error, not an Instance, not a check verdict, not the
// catalog. The client is shown to have read the file: the simulator issued it a token.
func TestSecretsStayOutOfLogsErrorsAndStatus(t *testing.T) {
	w := newWorld(t, gcptest.Options{})
	var log providertest.LogBuffer
	p := w.provider(t, log.Logger())
	key, err := os.ReadFile(w.credsFile)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		PrivateKey string `json:"private_key"`
	}
	if err := json.Unmarshal(key, &file); err != nil {
		t.Fatal(err)
	}
	pemBody := strings.Split(file.PrivateKey, "\n")[1] // a line of the key itself
	secrets := []string{sentinelKeyID, sentinelToken, pemBody, providertest.SentinelUserData, providertest.SentinelPassword}

	var seen []string
	note := func(v any) { seen = append(seen, fmt.Sprintf("%v %+v %#v", v, v, v)) }
	req := w.request("redact")
	req.UserData = providers.UserData("#cloud-config\n# " + providertest.SentinelUserData + "\n")
	req.Auth = &providers.Auth{Username: "crawler", Password: providertest.SentinelPassword}
	inst, err := p.Create(context.Background(), req)
	note(inst)
	note(err)
	got := settle(t, p, inst.ID)
	note(got)
	list, err := p.List(context.Background())
	note(list)
	note(err)
	note(p.Check(context.Background()))
	js, _ := json.Marshal(p.Catalog())
	seen = append(seen, string(js))
	if w.sim.TokensIssued() == 0 {
		t.Fatal("the simulator issued no token: the client did not use the key file")
	}

	// Failing paths: a foreign owner, a quota refusal, a broken request, a zone down, and
	// the credential refused, then unreadable, then not JSON: errors name the file only.
	other := req
	other.UID = "someone-else"
	_, err = p.Create(context.Background(), other)
	note(err)
	w.sim.FailInserts(zoneA, gcptest.FaultQuota)
	_, err = p.Create(context.Background(), w.request("redact-quota"))
	note(err)
	bad := w.request("redact-bad")
	bad.Port = 0
	_, err = p.Create(context.Background(), bad)
	note(err)
	w.sim.SetUnreachable(zoneB, true)
	_, err = p.List(context.Background())
	note(err)
	note(p.Check(context.Background()))
	w.sim.SetUnreachable(zoneB, false)

	w.rotate(t, "another-key", "another-token") // the provider still holds the old token
	if err := os.WriteFile(w.credsFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = p.Get(context.Background(), inst.ID)
	note(err)
	note(p.Check(context.Background()))
	broken := strings.Replace(string(key), "-----END PRIVATE KEY-----", "", 1)
	for _, content := range []string{broken, string(key[:len(key)/2]), `{"type":"bogus","private_key_id":"` + sentinelKeyID + `"}`} {
		if err := os.WriteFile(w.credsFile, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err = p.Get(context.Background(), inst.ID)
		if !errors.Is(err, providers.ErrPermanent) {
			t.Errorf("Get with an unusable key file: %v, want Permanent", err)
		}
		note(err)
		note(p.Check(context.Background()))
	}
	note(p.Delete(context.Background(), inst.ID))
	seen = append(seen, log.String())

	for _, s := range seen {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("secret %.12s... leaked into: %.400s", secret, s)
			}
		}
	}
	if !strings.Contains(log.String(), "userDataBytes=") {
		t.Errorf("the log does not say how much user-data there was (is debug logging on?)")
	}
}
