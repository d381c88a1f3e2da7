package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// The wire format of every record is pinned: a change to a field name or shape fails here
// and must be a deliberate, versioned change.
func TestGolden(t *testing.T) {
	op := Op{V: 1, ID: "op1", Kind: OpCreate, Proxy: "crawl-1", Provider: "local", Host: "local", UID: "u1",
		InstanceName: "egress-abcdefghijklmnop", SpecRevision: 7, SpecHash: "0123456789abcdef", IssuedAt: at}
	res := OpResult{V: 1, OpID: "op1", Kind: OpCreate, Proxy: "crawl-1", Provider: "local", Host: "local", Attempt: 1, Final: true,
		Instance: &Instance{ID: "local/egress-abcdefghijklmnop", Name: "egress-abcdefghijklmnop", State: "Running", Address: "127.0.0.2", Port: 3128, UID: "u1", CreatedAt: at},
		SpecHash: "0123456789abcdef", Worker: "host-1", StartedAt: at, At: at.Add(time.Second)}
	cases := map[string]any{
		"op.v1.json":        op,
		"op_result.v1.json": res,
		"event_op.v1.json":  Event{V: 1, ID: "e1", Kind: KindOpResult, Proxy: "crawl-1", At: at, Op: &res},
		"event_phase.v1.json": Event{V: 1, ID: "e2", Kind: KindPhase, Proxy: "crawl-1", At: at, From: PhaseProvisioning,
			Phase: PhaseRunning},
		"prober_member.v1.json": ProberMember{V: 1, ID: "3f9a0c1d2e4b5a69", Worker: "host-1", Filters: []string{"local", "kvm-home.h1"},
			Concurrency: 64, StartedAt: at, Owned: 5000, Backlog: 12, LagSeconds: 0.4},
		"event_prober.v1.json": Event{V: 1, ID: "e3", Kind: KindProber, Proxy: "3f9a0c1d2e4b5a69", At: at, Reason: ReasonProberBehind,
			Prober: &ProberLag{Worker: "host-1", Owned: 5000, Backlog: 1200, LagSeconds: 16.5, Concurrency: 1}},
		"proxy_status.v1.json": ProxyStatus{V: 1, Phase: PhaseRunning, Mode: "managed", UID: "u1", InstanceName: "egress-abcdefghijklmnop",
			InstanceID: "local/egress-abcdefghijklmnop", Provider: "local", Host: "local", IP: "127.0.0.2", Port: 3128,
			SpecHash: "0123456789abcdef", SpecRevision: 7, Op: &OpRef{Kind: OpGet, ID: "op2", Host: "local", IssuedAt: at, Attempts: 1},
			LastError:   &LastError{Class: ClassTransient, Message: "local get: transient error: timeout", At: at},
			ProvisionAt: at, AddressAt: at, NextPollAt: at.Add(2 * time.Minute), CreatedAt: at, UpdatedAt: at},
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("wire format changed:\n got %s\nwant %s", got, want)
			}
			// And the golden file decodes back to the same value.
			back := reflect.New(reflect.TypeOf(v))
			if err := json.Unmarshal(want, back.Interface()); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Elem().Interface(), v) {
				t.Fatalf("round trip differs:\n%+v\n%+v", back.Elem().Interface(), v)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	cases := map[string]string{
		OpsStream("kvm-home"):             "OPS_kvm-home",
		OpsSubjects("kvm-home"):           "egress.ops.kvm-home.>",
		OpSubject("kvm-home", "h1", "p1"): "egress.ops.kvm-home.h1.p1",
		HostFilter("kvm-home", "h1"):      "egress.ops.kvm-home.h1.>",
		HostConsumer("h1"):                "host_h1",
		OpLockKey("p1"):                   "op.p1",
		EventSubject(KindPhase, "p1"):     "egress.events.phase.p1",
		OpResultSubjects:                  "egress.events.op.>",
		Op{Proxy: "p1", ID: "x"}.MsgID():  "p1:x",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// Records from a newer minor version carry fields this version does not know: our own
// records are decoded leniently, so those are ignored rather than fatal.
func FuzzDecodeRecords(f *testing.F) {
	for _, name := range []string{"op.v1.json", "op_result.v1.json", "event_op.v1.json", "proxy_status.v1.json",
		"prober_member.v1.json", "event_prober.v1.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"v":1,"future":{"x":[1,2,3]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&Op{}, &OpResult{}, &Event{}, &ProxyStatus{}, &ProberMember{}, &ProbeRequest{}} {
			if json.Unmarshal(b, v) != nil {
				continue
			}
			again, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("decoded %T does not encode: %v", v, err)
			}
			if err := json.Unmarshal(again, v); err != nil {
				t.Fatalf("%T does not round-trip: %v", v, err)
			}
		}
	})
}

// Kinds lists every Kind constant of event.go, so `egressd events --kind` accepts each.
func TestKindsListsEveryKind(t *testing.T) {
	src, err := os.ReadFile("event.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?m)^\s+Kind\w+\s+EventKind = "(\w+)"`).FindAllStringSubmatch(string(src), -1)
	if len(declared) == 0 || len(declared) != len(Kinds) {
		t.Fatalf("%d kinds declared, Kinds has %d: %v", len(declared), len(Kinds), Kinds)
	}
	for _, d := range declared {
		if !slices.Contains(Kinds, EventKind(d[1])) {
			t.Errorf("kind %q is not in Kinds", d[1])
		}
	}
}
