package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/kvstore"
	"github.com/egressd/egressd/kvstore/kvstoretest"
)

// Statuses as the reconciler writes them during a rollout: `egressd status rollouts` counts
// each scope; `egressd rollout pause|resume` writes the pause record it and the reconciler
// read, and refuses a scope it does not know.
func TestStatusRolloutsAndPauses(t *testing.T) {
	srv, _, js := kvstoretest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	store, err := kvstore.Ensure(ctx, js, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := srv.ClientURL()
	if code, out, _ := runStatus(t, "rollouts", "--nats-url", url); code != 0 || !strings.Contains(out, "No rollout under way") {
		t.Fatalf("no rollout: %d %q", code, out)
	}
	put := func(name string, st events.ProxyStatus) {
		if _, err := kvstore.PutJSON(ctx, store.Status, name, st); err != nil {
			t.Fatal(err)
		}
	}
	r := func(stage events.RolloutStage) *events.Rollout {
		return &events.Rollout{Reason: events.ReasonSpecChanged, Stage: stage, Scope: "provider pve", Since: time.Now()}
	}
	put("a", events.ProxyStatus{V: 1, Phase: events.PhaseDraining, Provider: "pve", Rollout: r(events.RolloutDraining)})
	put("b", events.ProxyStatus{V: 1, Phase: events.PhaseReady, Provider: "pve", Rollout: r(events.RolloutWaiting)})
	put("c", events.ProxyStatus{V: 1, Phase: events.PhaseReady, Provider: "pve"})
	code, out, errs := runStatus(t, "rollouts", "--nats-url", url)
	if code != 0 || !strings.Contains(out, "provider pve") || !strings.Contains(out, "1/3 replaced, 1 draining, 0 replacing, 1 waiting") {
		t.Fatalf("status rollouts: %d %q %q", code, out, errs)
	}
	_, out, _ = runStatus(t, "rollouts", "-o", "json", "--nats-url", url)
	var list []events.RolloutProgress
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Total != 3 || list[0].Draining != 1 {
		t.Fatalf("-o json: %v %s", err, out)
	}

	if code, _, errs := runCommand(t, rolloutCmd, "pause", "provider", "pve", "--note", "checking", "--nats-url", url); code != 0 {
		t.Fatalf("pause: %d %s", code, errs)
	}
	if code, _, _ := runCommand(t, rolloutCmd, "pause", "pool", "web", "--nats-url", url); code != 0 {
		t.Fatal("pause pool")
	}
	var p events.RolloutPause
	if _, err := kvstore.GetJSON(ctx, store.Locks, events.RolloutPauseKey, &p); err != nil || !p.Paused("provider pve") || !p.Paused("pool web") || p.Scopes["provider pve"].Note != "checking" {
		t.Fatalf("pause record %+v %v", p, err)
	}
	if code, _, _ := runCommand(t, rolloutCmd, "resume", "provider", "pve", "--nats-url", url); code != 0 {
		t.Fatal("resume")
	}
	p = events.RolloutPause{}
	if _, err := kvstore.GetJSON(ctx, store.Locks, events.RolloutPauseKey, &p); err != nil || p.Paused("provider pve") || !p.Paused("pool web") {
		t.Fatalf("after resume %+v %v", p, err)
	}
	for _, bad := range [][]string{{"pause"}, {"pause", "provider", "Bad_Name"}, {"stop", "all"}, {"pause", "node", "x"}} {
		if code, _, _ := runCommand(t, rolloutCmd, append(bad, "--nats-url", url)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}
