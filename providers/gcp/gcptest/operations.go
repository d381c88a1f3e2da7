package gcptest

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// operation is a zone or global Operation
// (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations). done is closed
// when its status turns DONE, for zoneOperations.wait.
type operation struct {
	pb   *computepb.Operation
	done chan struct{}
}

// newOperation is PENDING; zone "" makes a global operation. Callers hold s.mu.
func (s *Server) newOperation(zone, kind, targetLink string, targetID uint64) *operation {
	id := s.id()
	name := fmt.Sprintf("operation-%d-%x", s.opts.Now().UnixMilli(), id)
	op := &computepb.Operation{
		Kind:          proto.String("compute#operation"),
		Id:            proto.Uint64(id),
		Name:          proto.String(name),
		OperationType: proto.String(kind),
		Status:        computepb.Operation_PENDING.Enum(),
		Progress:      proto.Int32(0),
		TargetLink:    proto.String(targetLink),
		TargetId:      proto.Uint64(targetID),
		User:          proto.String("egressd@" + s.opts.Project + ".iam.gserviceaccount.com"),
		InsertTime:    proto.String(s.timestamp()),
	}
	o := &operation{pb: op, done: make(chan struct{})}
	if zone == "" {
		op.SelfLink = proto.String(selfLinkBase + "projects/" + s.opts.Project + "/global/operations/" + name)
		s.globalOps[name] = o
	} else {
		op.Zone = proto.String(s.zoneURL(zone))
		op.SelfLink = proto.String(s.zoneURL(zone) + "/operations/" + name)
		s.zones[zone].ops[name] = o
	}
	return o
}

// running moves an operation to RUNNING. Callers hold s.mu.
func (s *Server) running(o *operation) {
	if o.pb.GetStatus() != computepb.Operation_PENDING {
		return
	}
	o.pb.Status = computepb.Operation_RUNNING.Enum()
	o.pb.Progress = proto.Int32(50)
	o.pb.StartTime = proto.String(s.timestamp())
}

// finish moves an operation to DONE, with an error when code is not "". httpStatus 0 leaves
// httpErrorStatusCode out: then Operation.Wait in the SDK returns nil although the operation
// failed (a trap of the SDK: see docs/providers/gcp.md). Callers hold s.mu.
func (s *Server) finish(o *operation, code, message string, httpStatus int) {
	if o.pb.GetStatus() == computepb.Operation_DONE {
		return
	}
	if o.pb.StartTime == nil {
		o.pb.StartTime = proto.String(s.timestamp())
	}
	o.pb.Status = computepb.Operation_DONE.Enum()
	o.pb.Progress = proto.Int32(100)
	o.pb.EndTime = proto.String(s.timestamp())
	if code != "" {
		o.pb.Error = &computepb.Error{Errors: []*computepb.Errors{{
			Code:    proto.String(code),
			Message: proto.String(message),
		}}}
		if httpStatus != 0 {
			o.pb.HttpErrorStatusCode = proto.Int32(int32(httpStatus))
			o.pb.HttpErrorMessage = proto.String(httpStatusName(httpStatus))
		}
	}
	close(o.done)
}

// httpStatusName is the upper-case form operations carry ("FORBIDDEN", "SERVICE UNAVAILABLE").
func httpStatusName(code int) string {
	b := []byte(http.StatusText(code))
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func (s *Server) lookupZoneOp(w http.ResponseWriter, r *http.Request) (*operation, bool) {
	z, ok := s.project(w, r)
	if !ok {
		return nil, false
	}
	o, ok := z.ops[r.PathValue("op")]
	if !ok {
		writeError(w, notFound(fmt.Sprintf("projects/%s/zones/%s/operations/%s", s.opts.Project, z.name, r.PathValue("op"))))
		return nil, false
	}
	return o, true
}

// getZoneOperation: https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/get
func (s *Server) getZoneOperation(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	o, ok := s.lookupZoneOp(w, r)
	var pb proto.Message
	if ok {
		pb = proto.Clone(o.pb)
	}
	s.mu.Unlock()
	if ok {
		writeJSON(w, pb)
	}
}

// waitBudget bounds zoneOperations.wait, which "waits until the specified operation is DONE
// or the request times out" (2 minutes on the real service; shorter here, same answer: the
// operation as it is).
const waitBudget = 30 * time.Second

// waitZoneOperation: https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/wait
func (s *Server) waitZoneOperation(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	o, ok := s.lookupZoneOp(w, r)
	s.mu.Unlock()
	if !ok {
		return
	}
	t := time.NewTimer(waitBudget)
	defer t.Stop()
	select {
	case <-o.done:
	case <-t.C:
	case <-r.Context().Done():
	case <-s.ctx.Done():
	}
	s.mu.Lock()
	pb := proto.Clone(o.pb)
	s.mu.Unlock()
	writeJSON(w, pb)
}

// getGlobalOperation: https://cloud.google.com/compute/docs/reference/rest/v1/globalOperations/get
func (s *Server) getGlobalOperation(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.project(w, r); !ok {
		return
	}
	o, ok := s.globalOps[r.PathValue("op")]
	if !ok {
		writeError(w, notFound(fmt.Sprintf("projects/%s/global/operations/%s", s.opts.Project, r.PathValue("op"))))
		return
	}
	writeJSON(w, proto.Clone(o.pb))
}

// listZoneOperations: https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/list,
// with the filter modelled on targetLink, operationType and status (equality, AND), oldest
// first, all on one page.
func (s *Server) listZoneOperations(w http.ResponseWriter, r *http.Request) {
	terms, err := parseOpFilter(r.URL.Query().Get("filter"))
	if err != nil {
		writeError(w, invalid(fmt.Sprintf("Invalid value for field 'filter': '%s'. Invalid list filter expression: %v.", r.URL.Query().Get("filter"), err)))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	z, ok := s.project(w, r)
	if !ok {
		return
	}
	out := &computepb.OperationList{
		Kind:     proto.String("compute#operationList"),
		Id:       proto.String("projects/" + s.opts.Project + "/zones/" + z.name + "/operations"),
		SelfLink: proto.String(s.zoneURL(z.name) + "/operations"),
	}
	for _, o := range z.ops {
		fields := map[string]string{"targetLink": o.pb.GetTargetLink(), "operationType": o.pb.GetOperationType(), "status": o.pb.GetStatus().String()}
		if matches(fields, terms) {
			out.Items = append(out.Items, proto.Clone(o.pb).(*computepb.Operation))
		}
	}
	slices.SortFunc(out.Items, func(a, b *computepb.Operation) int { return cmp.Compare(a.GetId(), b.GetId()) })
	writeJSON(w, out)
}

// deleteZoneOperation: https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations/delete.
// The answer is empty; the operation is no longer listed or found. A wait in flight on it
// still returns.
func (s *Server) deleteZoneOperation(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.lookupZoneOp(w, r)
	if !ok {
		return
	}
	z := s.zones[r.PathValue("zone")]
	delete(z.ops, o.pb.GetName())
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	_, _ = w.Write([]byte("{}"))
}
