package events

import (
	"encoding/json"
	"testing"
)

func TestRolloutsOfCountsEachScope(t *testing.T) {
	outdated := func(scope string, stage RolloutStage) *Rollout {
		return &Rollout{Reason: ReasonSpecChanged, Scope: scope, Stage: stage}
	}
	statuses := []ProxyStatus{
		{Provider: "pve", Rollout: outdated("provider pve", RolloutDraining)},
		{Provider: "pve", Rollout: outdated("provider pve", RolloutReplacing)},
		{Provider: "pve", Rollout: outdated("provider pve", RolloutWaiting)},
		{Provider: "pve"},
		{Provider: "pve", Pool: "web", Rollout: outdated("pool web", RolloutPaused)},
		{Provider: "pve", Pool: "web"},
		{Provider: "local"}, // no rollout: not listed
	}
	got := RolloutsOf(statuses)
	if len(got) != 2 {
		t.Fatalf("scopes %+v, want pool web and provider pve", got)
	}
	if s := got[1].String(); got[1].Scope != "provider pve" || s != "1/4 replaced, 1 draining, 1 replacing, 1 waiting" {
		t.Errorf("provider pve: %q", s)
	}
	if s := got[0].String(); got[0].Scope != "pool web" || s != "1/2 replaced, 0 draining, 0 replacing, 1 waiting (paused)" {
		t.Errorf("pool web: %q", s)
	}
}

func TestRolloutPausePausedScopes(t *testing.T) {
	p := RolloutPause{Scopes: map[string]PausedScope{"pool web": {}}}
	if !p.Paused("pool web") || p.Paused("provider pve") {
		t.Fatalf("one scope: %+v", p)
	}
	p.Scopes["*"] = PausedScope{}
	if !p.Paused("provider pve") {
		t.Fatal("* pauses every scope")
	}
	if (RolloutPause{}).Paused("pool web") {
		t.Fatal("no record pauses nothing")
	}
}

// The pause record is read by every reconciler leader from a bucket operators write: no
// value makes the read panic, and what decodes answers Paused.
func FuzzRolloutPause(f *testing.F) {
	f.Add([]byte(`{"v":1,"scopes":{"pool web":{"at":"2026-12-01T12:00:00Z","by":"ops"}}}`))
	f.Add([]byte(`{"scopes":null}`))
	f.Add([]byte(`{"scopes":{"*":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p RolloutPause
		if json.Unmarshal(b, &p) != nil {
			return
		}
		_ = p.Paused("pool web")
		_ = p.Paused("*")
	})
}
