package reconciler

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/egressd/egressd/events"
	"github.com/egressd/egressd/providers"
	"github.com/egressd/egressd/workers"
)

// Folding an op's result into the status: what the provider answered, the instance it
// observed, and the address it gave the proxy (docs/lifecycle.md, "Folding op results").

// fold applies an op result to the status.
func (d *decider) fold(r *events.OpResult) {
	st := d.st
	if st.Op.Instance != "" {
		d.foldExtra(r, st.Op.Instance)
		return
	}
	if r.Error != "" {
		st.LastError = &events.LastError{Class: r.ErrorClass, Message: r.Error, At: r.At}
	}
	if !r.Final {
		st.Op.Attempts = r.Attempt
		return
	}
	st.Op = nil
	class := r.ErrorClass
	if class == events.ClassNotFound && r.Kind == events.OpCreate {
		class = events.ClassTransient // the contract forbids it; never read it as "gone"
	}
	switch class {
	case events.ClassNone:
		st.LastError, st.Failures = nil, 0
		if r.Kind == events.OpDelete && r.Instance != nil {
			st.RetryAt = d.now.Add(d.p.DeletionPoll) // still going away; delete again then
			return
		}
		if r.Kind == events.OpDelete {
			d.gone()
			return
		}
		d.observe(r.Instance)
	case events.ClassNotFound:
		st.LastError, st.Failures = nil, 0
		switch {
		case r.Kind != events.OpGet || st.Teardown != "":
		case d.expired():
			// The collector deleted it on its own mark's word (decision 0076).
			st.Reason, st.Message = events.ReasonLifetimeExceeded, d.lifetimeMessage("was deleted by the collector; creating a new one")
		default:
			st.Reason, st.Message = events.ReasonInstanceLost, "the instance disappeared; creating it again"
		}
		d.gone()
	case events.ClassStale:
		// The spec moved on under the op; deciding again issues one for the current spec.
	case events.ClassQuota:
		if r.Kind == events.OpGet {
			// The instance could not be made for lack of room (an asynchronous create
			// failed after the create op succeeded, as gcp's inserts do): there is none, and
			// after the wait the next op is a create, not another get of the same failure.
			d.gone()
		}
		st.RetryAt = d.now.Add(d.p.QuotaRetry)
		st.Reason, st.Message = events.ReasonQuota, r.Error
	case events.ClassPermanent:
		if r.Kind == events.OpDelete {
			d.backoff(r.Error) // deletion is never latched
			return
		}
		d.fail(events.ReasonPermanent, r.Error)
	default:
		d.backoff(r.Error)
	}
}

func (d *decider) backoff(msg string) {
	d.st.Failures++
	d.st.RetryAt = d.now.Add(workers.Backoff(d.st.Failures, d.p.BackoffBase, d.p.BackoffMax))
	d.st.Reason, d.st.Message = events.ReasonTransient, msg
}

// gone records that no instance exists any more.
func (d *decider) gone() {
	st := d.st
	st.InstanceID, st.IP, st.Port, st.SpecHash, st.ExpectedEgress = "", "", 0, "", ""
	st.ProvisionAt, st.NextPollAt, st.AddrMisses, st.AddressAt = time.Time{}, time.Time{}, 0, time.Time{}
	st.Generation = ""
	st.ExpiresAt = time.Time{}
}

// setAddress records the proxy's address, and when it changed, so that readers can tell a
// proxy nobody has probed since its address appeared (ProbeOverdue) from a new one.
func (d *decider) setAddress(ip string, port int) {
	st := d.st
	switch {
	case ip == "":
		st.AddressAt = time.Time{}
	case st.IP != ip || st.Port != port:
		st.AddressAt = d.now
	case st.AddressAt.IsZero():
		// A status from before addressAt existed: the address is older than anything known
		// of it, and its probes must keep counting, so take the start of the current create.
		st.AddressAt = cmp.Or(st.ProvisionAt, st.CreatedAt, d.now)
	}
	st.IP, st.Port = ip, port
}

// observe records what a create or get reported.
func (d *decider) observe(inst *events.Instance) {
	st := d.st
	if inst == nil {
		return
	}
	st.InstanceID = inst.ID
	st.ExpiresAt = inst.ExpiresAt
	d.setAddress(st.IP, inst.Port)
	switch providers.State(inst.State) {
	case providers.StateRunning:
		d.setAddress(inst.Address, inst.Port)
		st.ExpectedEgress = inst.EgressIP
		st.AddrMisses, st.Deadlines = 0, 0
		st.NextPollAt = d.now.Add(d.p.DriftPoll)
		if st.Reason == events.ReasonCreating || st.Reason == events.ReasonWaitingForAddress || st.Reason == events.ReasonTransient || st.Reason == events.ReasonInstanceLost || st.Reason == events.ReasonAddressLost ||
			st.Reason == events.ReasonLifetimeExceeded {
			st.Reason, st.Message = "", ""
		}
	case providers.StateProvisioning:
		if st.IP == "" {
			// From provisionAt, which is in status: a new leader polls on the same schedule.
			st.NextPollAt = d.now.Add(d.p.addrPoll(d.now.Sub(st.ProvisionAt)))
			st.Reason = events.ReasonWaitingForAddress
			return
		}
		// Hysteresis: one read without an address does not drop a working proxy.
		st.NextPollAt = d.now.Add(d.p.ProvisioningPoll)
		st.AddrMisses++
		if st.AddrMisses >= d.p.AddrMissLimit {
			// From here it waits for an address again, as after a create: the next read comes
			// FirstAddrPoll later, not ProvisioningPoll.
			st.AddrMisses, st.ProvisionAt = 0, d.now
			st.NextPollAt = d.now.Add(d.p.addrPoll(0))
			d.setAddress("", st.Port)
			st.Reason, st.Message = events.ReasonAddressLost, fmt.Sprintf("no address in %d consecutive reads", d.p.AddrMissLimit)
		}
	default: // Stopped, Terminated: it will not recover by itself
		st.Teardown = events.Reason("Instance" + inst.State) // InstanceStopped, InstanceTerminated
		st.Reason, st.Message = st.Teardown, "the instance is "+strings.ToLower(inst.State)+"; deleting and creating it again"
	}
}
