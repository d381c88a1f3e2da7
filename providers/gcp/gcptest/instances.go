package gcptest

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Instance statuses, https://cloud.google.com/compute/docs/instances/instance-life-cycle.
const (
	StatusProvisioning = "PROVISIONING"
	StatusStaging      = "STAGING"
	StatusRunning      = "RUNNING"
	StatusStopping     = "STOPPING"
	StatusTerminated   = "TERMINATED"
)

// instance is one VM. visible turns true when its insert operation starts RUNNING: before
// that the name is taken (a second insert gets 409) but get answers 404, as the service does
// while an insert is PENDING.
type instance struct {
	pb       *computepb.Instance
	zone     string
	addr     netip.Addr
	visible  bool
	deleting bool
	proxy    *proxy
}

// nameRE is RFC 1035 as the insert reference requires of resource.name.
var nameRE = regexp.MustCompile(`^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$`)

const maxBody = 1 << 20

func (s *Server) instancePath(zone, name string) string {
	return fmt.Sprintf("projects/%s/zones/%s/instances/%s", s.opts.Project, zone, name)
}

// insertInstance: https://cloud.google.com/compute/docs/reference/rest/v1/instances/insert
func (s *Server) insertInstance(w http.ResponseWriter, r *http.Request) {
	var in computepb.Instance
	if !decodeBody(w, r, &in) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	z, ok := s.project(w, r)
	if !ok {
		return
	}
	if e, bad := validateInsert(&in); bad {
		writeError(w, e)
		return
	}
	// requestId: "if you make a request with the same request ID, the server ... ignores the
	// second request", answering the first one's operation.
	reqID := r.URL.Query().Get("requestId")
	if reqID != "" {
		if o, ok := s.requestIDs[z.name+"/"+reqID]; ok {
			writeJSON(w, proto.Clone(o.pb))
			return
		}
	}
	name := in.GetName()
	if _, taken := z.instances[name]; taken {
		writeError(w, alreadyExists(s.instancePath(z.name, name)))
		return
	}
	region := regionOf(z.name)
	fault := s.nextFault(z.name)
	if fault == FaultQuota {
		writeError(w, apiError{code: http.StatusForbidden, reason: ReasonQuotaExceeded,
			message: fmt.Sprintf(quotaMessageCPUs, region)})
		return
	}
	if len(s.free) == 0 {
		writeError(w, apiError{code: http.StatusForbidden, reason: ReasonQuotaExceeded,
			message: fmt.Sprintf(quotaMessageAddresses, len(s.opts.Addresses), region)})
		return
	}
	addr := s.free[0]
	s.free = slices.Delete(s.free, 0, 1)

	inst := &instance{pb: s.instanceResource(z.name, &in, addr), zone: z.name, addr: addr}
	z.instances[name] = inst
	s.inserted++
	op := s.newOperation(z.name, "insert", inst.pb.GetSelfLink(), inst.pb.GetId())
	if reqID != "" {
		s.requestIDs[z.name+"/"+reqID] = op
	}
	s.wg.Add(1)
	go s.provision(inst, op, fault)
	writeJSON(w, proto.Clone(op.pb))
}

// decodeBody reads the request's JSON resource into m; on failure it has written a 400.
func decodeBody(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		writeError(w, invalid("Unreadable request body."))
		return false
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, m); err != nil {
		writeError(w, invalid("Invalid JSON payload received. "+err.Error()))
		return false
	}
	return true
}

func validateInsert(in *computepb.Instance) (apiError, bool) {
	switch {
	case in.GetName() == "":
		return invalid("Invalid value for field 'resource.name': ''. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'"), true
	case !nameRE.MatchString(in.GetName()):
		return invalid(fmt.Sprintf("Invalid value for field 'resource.name': '%s'. Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'", in.GetName())), true
	case in.GetMachineType() == "":
		return invalid("Invalid value for field 'resource.machineType': ''. Machine type must be specified."), true
	case len(in.GetDisks()) == 0:
		return invalid("Invalid value for field 'resource.disks': ''. Boot disk must be specified."), true
	}
	return apiError{}, false
}

// regionOf is the zone's region: "us-central1-a" → "us-central1".
func regionOf(zone string) string {
	if i := strings.LastIndexByte(zone, '-'); i > 0 {
		return zone[:i]
	}
	return zone
}

// instanceResource is the stored Instance: the request's fields plus what the service fills
// in (https://cloud.google.com/compute/docs/reference/rest/v1/instances: kind, id,
// creationTimestamp, selfLink, zone, full machineType URL, nic0 with networkIP, and the
// access config's natIP once RUNNING).
func (s *Server) instanceResource(zone string, in *computepb.Instance, addr netip.Addr) *computepb.Instance {
	pb := proto.Clone(in).(*computepb.Instance)
	pb.Kind = proto.String("compute#instance")
	pb.Id = proto.Uint64(s.id())
	pb.CreationTimestamp = proto.String(s.timestamp())
	pb.Zone = proto.String(s.zoneURL(zone))
	pb.SelfLink = proto.String(s.zoneURL(zone) + "/instances/" + in.GetName())
	pb.Status = proto.String(StatusProvisioning)
	if mt := pb.GetMachineType(); !strings.HasPrefix(mt, "https://") {
		if !strings.Contains(mt, "/") {
			mt = "zones/" + zone + "/machineTypes/" + mt
		}
		pb.MachineType = proto.String(selfLinkBase + "projects/" + s.opts.Project + "/" + mt)
	}
	if len(pb.NetworkInterfaces) == 0 {
		pb.NetworkInterfaces = []*computepb.NetworkInterface{{}}
	}
	for i, nic := range pb.NetworkInterfaces {
		nic.Kind = proto.String("compute#networkInterface")
		nic.Name = proto.String(fmt.Sprintf("nic%d", i))
		if nic.Network == nil {
			nic.Network = proto.String("global/networks/default")
		}
		if !strings.HasPrefix(nic.GetNetwork(), "https://") {
			nic.Network = proto.String(selfLinkBase + "projects/" + s.opts.Project + "/" + nic.GetNetwork())
		}
		if i == 0 {
			nic.NetworkIP = proto.String(addr.String())
		}
		for _, ac := range nic.AccessConfigs {
			ac.Kind = proto.String("compute#accessConfig")
			if ac.Type == nil {
				ac.Type = proto.String("ONE_TO_ONE_NAT")
			}
		}
	}
	return pb
}

// provision runs an insert's asynchronous steps: operation PENDING → RUNNING (instance
// PROVISIONING, now visible) → instance STAGING → RUNNING with its proxy started and natIP
// set, operation DONE; or the fault's failure on the way.
func (s *Server) provision(inst *instance, op *operation, fault Fault) {
	defer s.wg.Done()
	d := s.delays()
	region := regionOf(inst.zone)

	if !s.advance(inst, op, d.Pending) {
		return
	}
	s.running(op)
	if fault == FaultQuotaAsync {
		s.fail(inst, op, CodeQuotaExceeded, fmt.Sprintf(quotaMessageCPUs, region), 0)
		return
	}
	inst.visible = true
	s.mu.Unlock()

	if !s.advance(inst, op, d.Provisioning) {
		return
	}
	if fault == FaultStockout {
		s.fail(inst, op, CodeZoneResourcePoolExhausted, fmt.Sprintf(stockoutMessageFormat, inst.zone), http.StatusServiceUnavailable)
		return
	}
	inst.pb.Status = proto.String(StatusStaging)
	s.mu.Unlock()

	if !s.advance(inst, op, d.Staging) {
		return
	}
	p, err := s.startProxy(inst)
	if err != nil {
		s.fail(inst, op, CodeInternalError, "Internal error. Please try again or contact Google Support. ("+err.Error()+")", http.StatusInternalServerError)
		return
	}
	defer s.mu.Unlock()
	inst.proxy = p
	inst.pb.Status = proto.String(StatusRunning)
	inst.pb.LastStartTimestamp = proto.String(s.timestamp())
	if nic := inst.pb.NetworkInterfaces[0]; len(nic.AccessConfigs) > 0 {
		nic.AccessConfigs[0].NatIP = proto.String(inst.addr.String())
	}
	s.finish(op, "", "", 0)
}

// advance waits d and locks s.mu for the insert's next step. It answers false, not locked,
// when the simulator closed or the instance was deleted meanwhile (its insert operation is
// then DONE).
func (s *Server) advance(inst *instance, op *operation, d time.Duration) bool {
	if !s.sleep(d) {
		return false
	}
	s.mu.Lock()
	if !s.current(inst) {
		s.finish(op, "", "", 0)
		s.mu.Unlock()
		return false
	}
	return true
}

// fail ends an insert whose instance never runs: gone, its operation DONE with the error, its
// address back in the pool. Called with s.mu held; returns with it released.
func (s *Server) fail(inst *instance, op *operation, code, message string, httpStatus int) {
	s.forget(inst)
	s.finish(op, code, message, httpStatus)
	s.mu.Unlock()
	s.release(inst)
}

// sleep waits d, false when the simulator closes first.
func (s *Server) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// current reports whether inst is still the instance of its name, not being deleted. Callers
// hold s.mu.
func (s *Server) current(inst *instance) bool {
	return s.zones[inst.zone].instances[inst.pb.GetName()] == inst && !inst.deleting
}

// forget removes inst from its zone. Callers hold s.mu, and call release after unlocking.
func (s *Server) forget(inst *instance) {
	z := s.zones[inst.zone]
	if z.instances[inst.pb.GetName()] == inst {
		delete(z.instances, inst.pb.GetName())
	}
}

// release stops inst's proxy and only then returns its address to the pool, so that the next
// instance given the address can listen on it. Called without s.mu.
func (s *Server) release(inst *instance) {
	s.mu.Lock()
	p := inst.proxy
	inst.proxy = nil
	s.mu.Unlock()
	p.stop()
	s.mu.Lock()
	if inst.addr.IsValid() {
		s.free = append(s.free, inst.addr)
		inst.addr = netip.Addr{}
	}
	s.mu.Unlock()
}

// lookupInstance finds the visible instance the request names; on failure it has written
// the error. Callers hold s.mu.
func (s *Server) lookupInstance(w http.ResponseWriter, r *http.Request) (*zoneState, *instance, bool) {
	z, ok := s.project(w, r)
	if !ok {
		return nil, nil, false
	}
	inst, ok := z.instances[r.PathValue("name")]
	if !ok || !inst.visible {
		writeError(w, notFound(s.instancePath(z.name, r.PathValue("name"))))
		return nil, nil, false
	}
	return z, inst, true
}

// getInstance: https://cloud.google.com/compute/docs/reference/rest/v1/instances/get
func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, inst, ok := s.lookupInstance(w, r); ok {
		writeJSON(w, proto.Clone(inst.pb))
	}
}

// deleteInstance: https://cloud.google.com/compute/docs/reference/rest/v1/instances/delete.
// The instance turns STOPPING when the operation starts and is gone when it is DONE.
func (s *Server) deleteInstance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	z, inst, ok := s.lookupInstance(w, r)
	if !ok {
		return
	}
	op := s.newOperation(z.name, "delete", inst.pb.GetSelfLink(), inst.pb.GetId())
	if inst.deleting {
		// A second delete while one runs: its own operation, done with the first.
		s.finish(op, "", "", 0)
		writeJSON(w, proto.Clone(op.pb))
		return
	}
	inst.deleting = true
	s.wg.Add(1)
	go s.remove(inst, op)
	writeJSON(w, proto.Clone(op.pb))
}

func (s *Server) remove(inst *instance, op *operation) {
	defer s.wg.Done()
	d := s.delays()
	if !s.sleep(d.Pending) {
		return
	}
	s.mu.Lock()
	s.running(op)
	inst.pb.Status = proto.String(StatusStopping)
	s.mu.Unlock()
	if !s.sleep(d.Stopping) {
		return
	}
	s.mu.Lock()
	s.forget(inst)
	s.mu.Unlock()
	s.release(inst)
	s.mu.Lock()
	s.finish(op, "", "", 0)
	s.mu.Unlock()
}

// Preempt preempts a Spot VM as the service does
// (https://cloud.google.com/compute/docs/instances/spot): its proxy stops and, with
// scheduling.instanceTerminationAction DELETE, the instance is deleted; otherwise it is
// TERMINATED with no natIP. A compute.instances.preempted operation records it.
func (s *Server) Preempt(zone, name string) error {
	s.mu.Lock()
	z, ok := s.zones[zone]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("gcptest: unknown zone %q", zone)
	}
	inst, ok := z.instances[name]
	if !ok || !inst.visible || inst.deleting {
		s.mu.Unlock()
		return fmt.Errorf("gcptest: no instance %q in zone %q", name, zone)
	}
	op := s.newOperation(zone, "compute.instances.preempted", inst.pb.GetSelfLink(), inst.pb.GetId())
	s.finish(op, "", "", 0)
	if inst.pb.GetScheduling().GetInstanceTerminationAction() == "DELETE" {
		s.forget(inst)
		s.mu.Unlock()
		s.release(inst)
		return nil
	}
	inst.pb.Status = proto.String(StatusTerminated)
	for _, ac := range inst.pb.NetworkInterfaces[0].GetAccessConfigs() {
		ac.NatIP = nil
	}
	p := inst.proxy
	inst.proxy = nil
	s.mu.Unlock()
	// The address stays the instance's (its internal IP survives a stop) until it is deleted.
	p.stop()
	return nil
}
