package gcptest

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// listNames runs aggregatedList through the SDK's iterator and returns the instance names
// (sorted) and the scopes that carried an UNREACHABLE warning.
func (e *env) listNames(t *testing.T, filter string) ([]string, []string, error) {
	t.Helper()
	req := &computepb.AggregatedListInstancesRequest{Project: project}
	if filter != "" {
		req.Filter = proto.String(filter)
	}
	it := e.ic.AggregatedList(e.ctx, req)
	var names, unreachable []string
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		for _, inst := range pair.Value.GetInstances() {
			names = append(names, inst.GetName())
		}
		if pair.Value.GetWarning().GetCode() == unreachableWarning {
			unreachable = append(unreachable, pair.Key)
		}
	}
	slices.Sort(names)
	return names, unreachable, nil
}

// listPartial calls aggregatedList with returnPartialSuccess=true over plain HTTP (the SDK's
// request has no such field in v1.75.0) and decodes the answer as the SDK would.
func (e *env) listPartial(t *testing.T, filter string) *computepb.InstanceAggregatedList {
	t.Helper()
	q := url.Values{"returnPartialSuccess": {"true"}, "filter": {filter}}
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet,
		e.sim.URL()+"/compute/v1/projects/"+project+"/aggregated/instances?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("aggregatedList: %d %s %v", resp.StatusCode, body, err)
	}
	var out computepb.InstanceAggregatedList
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestAggregatedListFilter(t *testing.T) {
	e := newEnv(t, 3)
	e.insertRunning(t, instanceReq(zoneA, "a1", map[string]string{"egressd-managed": "true", "egressd-uid": "u1"}))
	e.insertRunning(t, instanceReq(zoneB, "b1", map[string]string{"egressd-managed": "true", "egressd-uid": "u2"}))
	e.insertRunning(t, instanceReq(zoneB, "other", map[string]string{"team": "web"}))

	tests := []struct {
		filter string
		want   []string
	}{
		{filter: "", want: []string{"a1", "b1", "other"}},
		{filter: `labels.egressd-managed = "true"`, want: []string{"a1", "b1"}},
		{filter: `labels.egressd-managed=true`, want: []string{"a1", "b1"}},
		{filter: `labels.egressd-managed = "true" AND labels.egressd-uid = "u2"`, want: []string{"b1"}},
		{filter: `(labels.egressd-managed = "true") AND (labels.egressd-uid = "u1")`, want: []string{"a1"}},
		{filter: `labels.egressd-managed = "false"`, want: nil},
		{filter: `labels.missing = "x"`, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.filter, func(t *testing.T) {
			got, unreachables, err := e.listNames(t, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) || len(unreachables) != 0 {
				t.Fatalf("names %v unreachables %v, want %v and none", got, unreachables, tt.want)
			}
		})
	}
	_, _, err := e.listNames(t, `name = "a1"`)
	wantAPIError(t, err, 400, ReasonInvalid)
}

// With a zone unreachable its scope carries an UNREACHABLE warning instead of instances (all
// the SDK can show), and returnPartialSuccess lists it in unreachables.
func TestAggregatedListUnreachableZone(t *testing.T) {
	e := newEnv(t, 2)
	e.insertRunning(t, instanceReq(zoneA, "a1", map[string]string{"egressd-managed": "true"}))
	e.insertRunning(t, instanceReq(zoneB, "b1", map[string]string{"egressd-managed": "true"}))
	if err := e.sim.SetUnreachable(zoneB, true); err != nil {
		t.Fatal(err)
	}
	const managed = `labels.egressd-managed = "true"`
	got, unreachable, err := e.listNames(t, managed)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []string{"a1"}) || !slices.Equal(unreachable, []string{"zones/" + zoneB}) {
		t.Fatalf("names %v unreachable scopes %v", got, unreachable)
	}
	partial := e.listPartial(t, managed)
	if !slices.Equal(partial.GetUnreachables(), []string{"zones/" + zoneB}) {
		t.Fatalf("unreachables = %v", partial.GetUnreachables())
	}
	if n := len(partial.GetItems()["zones/"+zoneA].GetInstances()); n != 1 {
		t.Fatalf("%d instances in the reachable zone, want 1", n)
	}

	if err := e.sim.SetUnreachable(zoneB, false); err != nil {
		t.Fatal(err)
	}
	got, unreachable, err = e.listNames(t, "")
	if err != nil || !slices.Equal(got, []string{"a1", "b1"}) || len(unreachable) != 0 {
		t.Fatalf("after recovery: %v %v %v", got, unreachable, err)
	}
	if u := e.listPartial(t, managed).GetUnreachables(); len(u) != 0 {
		t.Fatalf("unreachables after recovery = %v", u)
	}
	if err := e.sim.SetUnreachable("mars-north1-a", true); err == nil {
		t.Error("unknown zone accepted")
	}
}

func TestParseFilter(t *testing.T) {
	tests := []struct {
		in   string
		want []labelTerm
		bad  bool
	}{
		{in: "", want: nil},
		{in: `labels.a = "x"`, want: []labelTerm{{"a", "x"}}},
		{in: `labels.a=x`, want: []labelTerm{{"a", "x"}}},
		{in: `labels.a = ""`, want: []labelTerm{{"a", ""}}},
		{in: `labels.a = "x" AND labels.b-c = "y_z"`, want: []labelTerm{{"a", "x"}, {"b-c", "y_z"}}},
		{in: `((labels.a = "x")) AND (labels.b=y)`, want: []labelTerm{{"a", "x"}, {"b", "y"}}},
		{in: `labels.a != "x"`, bad: true},
		{in: `labels.a = "x" OR labels.b = "y"`, bad: true},
		{in: `labels.A = "x"`, bad: true},
		{in: `name = "x"`, bad: true},
		{in: `labels.a = "x" AND`, bad: true},
		{in: `labels.a = "x`, bad: true},
	}
	for _, tt := range tests {
		got, err := parseFilter(tt.in)
		if (err != nil) != tt.bad {
			t.Errorf("parseFilter(%q) error = %v, want bad=%v", tt.in, err, tt.bad)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("parseFilter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseFilter(f *testing.F) {
	f.Add(`labels.a = "x" AND (labels.b=y)`)
	f.Add(`((((`)
	f.Fuzz(func(t *testing.T, in string) {
		terms, err := parseFilter(in)
		if err != nil && terms != nil {
			t.Fatalf("terms %v with error %v", terms, err)
		}
		for _, term := range terms {
			if term.key == "" {
				t.Fatalf("empty key from %q", in)
			}
		}
	})
}
