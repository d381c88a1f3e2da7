package reconciler

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/egressd/egressd/events"
)

// Changing any field of a health record that sameVerdict calls the same verdict must leave
// Decide's decision unchanged, or the leader would miss a decision by skipping it.
func TestSameVerdictCoversWhatDecideReads(t *testing.T) {
	p := DefaultPolicy()
	ext := `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128}}`
	managed := `{"provider":"local"}`
	healthy := events.ProxyHealth{V: 1, Proxy: "p1", Address: "127.0.0.2:3128", Healthy: true, ConsecutiveSuccesses: 1,
		SuccessThreshold: 1, FailureThreshold: 3, LastProbeAt: t0.Add(-time.Second)}
	healthy.Anonymity, healthy.LeakedHeaders, healthy.EgressIP, healthy.ExpectedEgress = events.AnonymityAnonymous, []string{"Via"}, "192.0.2.1", "192.0.2.1"
	healthy.Paths = []events.PathCheck{{Path: events.PathConnect, Anonymity: events.AnonymityElite}, {Path: events.PathForward, Anonymity: events.AnonymityAnonymous, Leaked: []string{"Via"}}}
	failing := healthy
	failing.Healthy, failing.ConsecutiveSuccesses, failing.ConsecutiveFailures, failing.LastError = false, 0, 3, "refused"
	cases := []struct {
		name string
		in   func(t *testing.T) Input
	}{
		{"external", func(t *testing.T) Input { return input(t, spec(t, ext), nil, t0) }},
		{"managed, running", func(t *testing.T) Input {
			s := spec(t, managed)
			return input(t, s, running(s), t0)
		}},
		{"external, requires elite", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128},"healthCheck":{"requireAnonymity":"elite"}}`), nil, t0)
		}},
		{"external, requires anonymous", func(t *testing.T) Input {
			return input(t, spec(t, `{"mode":"external","endpoint":{"host":"127.0.0.2","port":3128},"healthCheck":{"requireAnonymity":"anonymous"}}`), nil, t0)
		}},
	}
	// mutate gives every field of a copy a different value.
	mutate := func(h events.ProxyHealth, field string) events.ProxyHealth {
		v := reflect.ValueOf(&h).Elem().FieldByName(field)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int:
			v.SetInt(v.Int() + 1)
		case reflect.Float64:
			v.SetFloat(v.Float() + 1)
		case reflect.Bool:
			v.SetBool(!v.Bool())
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Struct {
				v.Set(reflect.ValueOf([]events.PathCheck{{Path: events.PathForward, Error: "refused"}}))
			} else {
				v.Set(reflect.ValueOf([]string{"X-Forwarded-For"}))
			}
		case reflect.Struct:
			v.Set(reflect.ValueOf(t0.Add(-3 * time.Second)))
		default:
			panic(fmt.Sprintf("field %s: add its kind to mutate", field))
		}
		return h
	}
	for _, tc := range cases {
		for _, base := range []events.ProxyHealth{healthy, failing} {
			for i := range reflect.TypeOf(base).NumField() {
				field := reflect.TypeOf(base).Field(i).Name
				other := mutate(base, field)
				if !sameVerdict(&base, &other) {
					continue
				}
				t.Run(fmt.Sprintf("%s/healthy=%v/%s", tc.name, base.Healthy, field), func(t *testing.T) {
					a, b := tc.in(t), tc.in(t)
					a.Health, b.Health = &base, &other
					da, db := Decide(p, a), Decide(p, b)
					if !reflect.DeepEqual(da, db) {
						t.Errorf("%s differs in a record sameVerdict calls the same, and the decision changed:\n%+v\n%+v", field, da.Status, db.Status)
					}
				})
			}
		}
	}
}

func TestSameVerdict(t *testing.T) {
	h := events.ProxyHealth{Address: "a:1", Healthy: true, FailureThreshold: 3}
	later := h
	later.LastProbeAt, later.LatencyMs, later.ConsecutiveSuccesses = t0, 3, 9
	moved := h
	moved.Address = "b:1"
	judged := h
	judged.Healthy, judged.ConsecutiveFailures = false, 3
	leaks := h
	leaks.Anonymity, leaks.LeakedHeaders = events.AnonymityTransparent, []string{"X-Forwarded-For"}
	moreLeaks := leaks
	moreLeaks.LeakedHeaders = []string{"X-Forwarded-For", "Via"}
	pathFailed := h
	pathFailed.Paths = []events.PathCheck{{Path: events.PathForward, Error: "refused"}}
	egress := h
	egress.EgressIP, egress.ExpectedEgress = "192.0.2.1", "192.0.2.2"
	for _, tc := range []struct {
		name string
		a, b *events.ProxyHealth
		want bool
	}{
		{"both unknown", nil, nil, true},
		{"became known", nil, &h, false},
		{"expired", &h, nil, false},
		{"probed again, same verdict", &h, &later, true},
		{"another address", &h, &moved, false},
		{"judged unhealthy", &h, &judged, false},
		{"another anonymity verdict", &h, &leaks, false},
		{"other leaked headers", &leaks, &moreLeaks, false},
		{"a path failed", &h, &pathFailed, false},
		{"another egress address", &h, &egress, false},
	} {
		if got := sameVerdict(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
