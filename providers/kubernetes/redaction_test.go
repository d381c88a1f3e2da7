package kubernetes

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/egressd/egressd/internal/leaseauth"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/providers/providertest"
)

const sentinelPassword = "SENTINEL-k8s-password-4e1d"

// The password never leaves egressd: the Secret holds its salted hash, and neither the logs
// (at debug), the namespace's events, the pod (spec and status), the instance nor an error
// holds it, while the proxy still checks it. A lease key, which the proxy needs whole, is in
// the Secret only.
func TestSecretNeverLeaks(t *testing.T) {
	needCluster(t)
	ns := namespace(t)
	startKubelet(t, ns, ModeNode)
	group := uniq("leak")
	sel := map[string]string{"egressd.test/group": group}
	makeNode(t, group+"-a", "127.0.106.1", sel)
	makeNode(t, group+"-b", "127.0.106.2", sel)
	var logs providertest.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p := newProvider(t, "leak", testConfig(ns, ModeNode, Target{Name: "leak", NodeSelector: sel}), log)

	pw := request("leak", nextPort())
	pw.Auth = &providers.Auth{Username: "crawler", Password: sentinelPassword}
	key := leaseauth.NewMaster().ProxyKey("leased")
	leased := request("leak", nextPort())
	leased.Auth = &providers.Auth{LeaseKey: providers.Secret(key.FileLine())}
	keyText := key.FileLine()[strings.LastIndex(key.FileLine(), ":")+1:]

	var seen []string
	for _, req := range []providers.CreateRequest{pw, leased} {
		inst, err := p.Create(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		inst = settle(t, p, inst.ID)
		b, _ := json.Marshal(inst)
		seen = append(seen, string(b))
		pod, err := admin.CoreV1().Pods(ns).Get(t.Context(), req.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, _ = json.Marshal(pod)
		seen = append(seen, string(b))
	}
	inst, _ := p.Get(t.Context(), p.podID(pw.Name))
	if got := fetchThrough(t, inst, pw.Auth, echoSite(t)); got != inst.Address {
		t.Errorf("through the password proxy the site saw %s", got)
	}
	user, pass := key.Sign("crawler-1", time.Now().Add(time.Hour))
	leasedInst, _ := p.Get(t.Context(), p.podID(leased.Name))
	fetchThrough(t, leasedInst, &providers.Auth{Username: user, Password: providers.Secret(pass)}, echoSite(t))

	// Errors: a second installation's Create over the name, and a bad port.
	forged := pw
	forged.Installation = "inst-forger"
	_, err := p.Create(t.Context(), forged)
	seen = append(seen, err.Error())
	bad := pw
	bad.Port = 80
	_, err = p.Create(t.Context(), bad)
	seen = append(seen, err.Error())

	events, err := admin.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(events)
	seen = append(seen, string(b), logs.String())
	secret, err := admin.CoreV1().Secrets(ns).Get(t.Context(), pw.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secret.Data { // every value, decoded: the Secret holds a hash only
		seen = append(seen, string(v))
	}
	for i, s := range seen {
		if strings.Contains(s, sentinelPassword) || strings.Contains(s, keyText) {
			t.Errorf("a secret leaked into what is seen (item %d): %s", i, s)
		}
	}
	if !strings.Contains(string(secret.Data[authKey]), "crawler:sha256:") {
		t.Errorf("the Secret holds %q, want the salted hash line", secret.Data[authKey])
	}
}
