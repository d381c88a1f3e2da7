package gcptest

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// aggregatedList: https://cloud.google.com/compute/docs/reference/rest/v1/instances/aggregatedList.
// items is keyed "zones/Z"; a zone with nothing to show carries a NO_RESULTS_ON_PAGE warning,
// an unreachable one an UNREACHABLE warning and, with returnPartialSuccess, a place in
// unreachables. All results are on one page.
//
// The SDK's AggregatedListInstancesRequest (compute v1.75.0) has no ReturnPartialSuccess
// field, so through the SDK a caller sees only the warning; the parameter is honoured for
// callers that add it to the query.
func (s *Server) aggregatedList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	terms, err := parseFilter(q.Get("filter"))
	if err != nil {
		writeError(w, invalid(fmt.Sprintf("Invalid value for field 'filter': '%s'. Invalid list filter expression: %v.", q.Get("filter"), err)))
		return
	}
	partial := false
	if v := q.Get("returnPartialSuccess"); v != "" {
		if partial, err = strconv.ParseBool(v); err != nil {
			writeError(w, invalid(fmt.Sprintf("Invalid value for field 'returnPartialSuccess': '%s'.", v)))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.project(w, r); !ok {
		return
	}
	out := &computepb.InstanceAggregatedList{
		Kind:     proto.String("compute#instanceAggregatedList"),
		Id:       proto.String("projects/" + s.opts.Project + "/aggregated/instances"),
		SelfLink: proto.String(selfLinkBase + "projects/" + s.opts.Project + "/aggregated/instances"),
		Items:    map[string]*computepb.InstancesScopedList{},
	}
	for _, zn := range s.opts.Zones {
		z := s.zones[zn]
		scope := "zones/" + zn
		if z.unreachable && s.unreachableShape == UnreachableOmitted {
			out.Unreachables = append(out.Unreachables, scope)
			out.Warning = warning(partialSuccessWarning, "Some results may be missing: a scope is unreachable.", scope)
			continue
		}
		if z.unreachable {
			// The scope's UNREACHABLE warning is there either way; returnPartialSuccess adds
			// the zone to unreachables.
			if partial {
				out.Unreachables = append(out.Unreachables, scope)
			}
			out.Items[scope] = &computepb.InstancesScopedList{Warning: warning(unreachableWarning,
				fmt.Sprintf("Scope '%s' is unreachable.", scope), scope)}
			continue
		}
		var list []*computepb.Instance
		for _, inst := range z.instances {
			if inst.visible && matches(inst.pb.GetLabels(), terms) {
				list = append(list, proto.Clone(inst.pb).(*computepb.Instance))
			}
		}
		slices.SortFunc(list, func(a, b *computepb.Instance) int {
			switch {
			case a.GetName() < b.GetName():
				return -1
			case a.GetName() > b.GetName():
				return 1
			}
			return 0
		})
		if len(list) == 0 {
			out.Items[scope] = &computepb.InstancesScopedList{Warning: warning(noResultsWarning,
				fmt.Sprintf("There are no results for scope '%s' on this page.", scope), scope)}
			continue
		}
		out.Items[scope] = &computepb.InstancesScopedList{Instances: list}
	}
	writeJSON(w, out)
}

func warning(code, message, scope string) *computepb.Warning {
	return &computepb.Warning{
		Code:    proto.String(code),
		Message: proto.String(message),
		Data:    []*computepb.Data{{Key: proto.String("scope"), Value: proto.String(scope)}},
	}
}
