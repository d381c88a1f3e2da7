package schemas

import "testing"

func TestInstanceAuthFollowsTheInstance(t *testing.T) {
	old, fresh := &Auth{Username: "u", Password: "old"}, &Auth{Username: "u", Password: "new"}
	type step struct {
		spec    uint64
		auth    *Auth
		status  uint64
		want    *Auth
		known   bool
		missing uint64
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the spec's own while the status names it", []step{{spec: 3, auth: old, status: 3, want: old, known: true}}},
		{"an older reconciler's status (no revision) takes the spec's", []step{{spec: 3, auth: old, want: old, known: true}}},
		{"a credential change keeps the instance's until the status moves", []step{
			{spec: 3, auth: old, status: 3, want: old, known: true},
			{spec: 4, auth: fresh, status: 3, want: old, known: true},
			{spec: 5, auth: fresh, status: 3, want: old, known: true},
			{spec: 5, auth: fresh, status: 5, want: fresh, known: true},
		}},
		{"a revision never seen is missing: fail closed", []step{{spec: 9, auth: fresh, status: 4, known: false, missing: 4}}},
		{"the status ahead of the spec view is missing too", []step{{spec: 3, auth: old, status: 4, known: false, missing: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c InstanceAuth
			for i, s := range tc.steps {
				c.SetSpec(s.spec, s.auth)
				c.SetStatus(s.status)
				got, known := c.Auth()
				if known != s.known || (known && got != s.want) {
					t.Fatalf("step %d: auth %+v known %v, want %+v %v", i, got, known, s.want, s.known)
				}
				if m, ok := c.Missing(); ok != (s.missing != 0) || m != s.missing {
					t.Fatalf("step %d: missing %d %v, want %d", i, m, ok, s.missing)
				}
			}
		})
	}
	var c InstanceAuth
	c.SetSpec(9, fresh)
	c.SetStatus(4)
	c.Resolve(4, old)
	if got, ok := c.Auth(); !ok || got != old {
		t.Fatalf("after Resolve: %+v %v", got, ok)
	}
}
