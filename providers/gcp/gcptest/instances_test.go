package gcptest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// fetchThrough gets site through the forward proxy at addr.
func fetchThrough(t *testing.T, addr, site string) (string, error) {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(site)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// refused reports whether nothing listens at addr any more.
func refused(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return true
	}
	c.Close()
	return false
}

// An instance goes insert → RUNNING with a natIP that is a working forward proxy → delete →
// gone (instances/get answers 404, the proxy is stopped).
func TestInstanceLifecycle(t *testing.T) {
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the site")
	}))
	defer site.Close()
	e := newEnv(t, 2)

	op, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "proxy-1", map[string]string{"egressd-managed": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	// The insert answers the operation PENDING; it is asynchronous.
	if got := op.Proto().GetStatus(); got != computepb.Operation_PENDING {
		t.Errorf("insert operation status = %v, want PENDING", got)
	}
	if got := op.Proto().GetOperationType(); got != "insert" {
		t.Errorf("operationType = %q, want insert", got)
	}
	if err := op.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	if !op.Done() || op.Proto().GetError() != nil || op.Proto().GetEndTime() == "" {
		t.Fatalf("operation after Wait = %v", op.Proto())
	}
	inst := e.get(t, zoneA, "proxy-1")
	if inst.GetStatus() != StatusRunning {
		t.Fatalf("status = %q, want RUNNING", inst.GetStatus())
	}
	ip := natIP(inst)
	if ip == "" || ip != inst.GetNetworkInterfaces()[0].GetNetworkIP() {
		t.Fatalf("natIP %q, networkIP %q: want the same pool address", ip, inst.GetNetworkInterfaces()[0].GetNetworkIP())
	}
	if got := inst.GetLabels()["egressd-managed"]; got != "true" {
		t.Errorf("labels = %v", inst.GetLabels())
	}
	if got := inst.GetMachineType(); got != selfLinkBase+"projects/"+project+"/zones/"+zoneA+"/machineTypes/e2-small" {
		t.Errorf("machineType = %q", got)
	}
	if got := inst.GetMetadata().GetItems(); len(got) != 1 || got[0].GetKey() != "user-data" {
		t.Errorf("metadata = %v", got)
	}
	body, err := fetchThrough(t, proxyAddr(ip), site.URL)
	if err != nil || body != "hello from the site" {
		t.Fatalf("through the proxy: %q, %v", body, err)
	}

	del, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zoneA, Instance: "proxy-1"})
	if err != nil {
		t.Fatal(err)
	}
	// zoneOperations.wait blocks on the server until DONE.
	done, err := e.zo.Wait(e.ctx, &computepb.WaitZoneOperationRequest{Project: project, Zone: zoneA, Operation: del.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if done.GetStatus() != computepb.Operation_DONE || done.GetOperationType() != "delete" {
		t.Fatalf("delete operation = %v", done)
	}
	e.wantGone(t, zoneA, "proxy-1")
	if !refused(proxyAddr(ip)) {
		t.Errorf("the proxy at %s still listens after delete", ip)
	}
	_, err = e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zoneA, Instance: "proxy-1"})
	wantAPIError(t, err, 404, ReasonNotFound)
}

// Synchronous insert failures are googleapi errors with the service's codes and reasons.
func TestInsertErrors(t *testing.T) {
	tests := []struct {
		name      string
		addresses int
		setup     func(t *testing.T, e *env)
		req       *computepb.InsertInstanceRequest
		code      int
		reason    string
	}{
		{name: "duplicate name", addresses: 2,
			setup: func(t *testing.T, e *env) { e.insertRunning(t, instanceReq(zoneA, "dup", nil)) },
			req:   instanceReq(zoneA, "dup", nil), code: 409, reason: ReasonAlreadyExists},
		{name: "quota", addresses: 1,
			setup: func(t *testing.T, e *env) { e.sim.FailInserts(zoneA, FaultQuota) },
			req:   instanceReq(zoneA, "q", nil), code: 403, reason: ReasonQuotaExceeded},
		{name: "address pool empty", addresses: 1,
			setup: func(t *testing.T, e *env) { e.insertRunning(t, instanceReq(zoneA, "first", nil)) },
			req:   instanceReq(zoneA, "second", nil), code: 403, reason: ReasonQuotaExceeded},
		{name: "bad name", addresses: 1, setup: func(*testing.T, *env) {},
			req: instanceReq(zoneA, "Bad_Name", nil), code: 400, reason: ReasonInvalid},
		{name: "unknown zone", addresses: 1, setup: func(*testing.T, *env) {},
			req: instanceReq("mars-north1-a", "x", nil), code: 400, reason: ReasonInvalid},
		{name: "unknown project", addresses: 1, setup: func(*testing.T, *env) {},
			req: func() *computepb.InsertInstanceRequest {
				r := instanceReq(zoneA, "x", nil)
				r.Project = "someone-else"
				return r
			}(), code: 404, reason: ReasonNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.addresses)
			tt.setup(t, e)
			_, err := e.ic.Insert(e.ctx, tt.req)
			ge := wantAPIError(t, err, tt.code, tt.reason)
			if ge.Message == "" || ge.Errors[0].Message == "" {
				t.Errorf("error body = %+v", ge)
			}
		})
	}
}

// The trap the provider must not fall into: an insert whose operation ends in QUOTA_EXCEEDED
// without httpErrorStatusCode makes Operation.Wait return nil; only the operation's error
// tells, and no instance ever appears.
func TestAsyncQuotaWaitReturnsNil(t *testing.T) {
	e := newEnv(t, 1)
	e.sim.FailInserts(zoneA, FaultQuotaAsync)
	op, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "late-quota", nil))
	if err != nil {
		t.Fatalf("insert answered %v; the quota failure must come later", err)
	}
	if err := op.Wait(e.ctx); err != nil {
		t.Fatalf("Wait = %v; the SDK returns nil here (if this changed, the provider may rely on it)", err)
	}
	errs := op.Proto().GetError().GetErrors()
	if len(errs) != 1 || errs[0].GetCode() != CodeQuotaExceeded || errs[0].GetMessage() == "" {
		t.Fatalf("operation errors = %v, want QUOTA_EXCEEDED", errs)
	}
	e.wantGone(t, zoneA, "late-quota")
	if n := e.sim.Instances(zoneA); n != 0 {
		t.Errorf("%d instances after the failed insert", n)
	}
	// The address went back to the pool: the next insert gets it.
	e.insertRunning(t, instanceReq(zoneA, "after-quota", nil))
}

// A stockout shows the instance PROVISIONING, then fails the operation with
// ZONE_RESOURCE_POOL_EXHAUSTED and httpErrorStatusCode 503, which Wait does report.
func TestStockout(t *testing.T) {
	e := newEnv(t, 1)
	e.sim.FailInserts(zoneA, FaultStockout)
	op, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "no-room", nil))
	if err != nil {
		t.Fatal(err)
	}
	err = op.Wait(e.ctx)
	wantAPIError(t, err, 503, "")
	errs := op.Proto().GetError().GetErrors()
	if len(errs) != 1 || errs[0].GetCode() != CodeZoneResourcePoolExhausted {
		t.Fatalf("operation errors = %v, want ZONE_RESOURCE_POOL_EXHAUSTED", errs)
	}
	if op.Proto().GetHttpErrorStatusCode() != 503 || op.Proto().GetHttpErrorMessage() != "SERVICE UNAVAILABLE" {
		t.Errorf("http error = %d %q", op.Proto().GetHttpErrorStatusCode(), op.Proto().GetHttpErrorMessage())
	}
	e.wantGone(t, zoneA, "no-room")
	e.insertRunning(t, instanceReq(zoneA, "no-room", nil)) // the name and address are free again
}

// A 429 on insert is not retried by the SDK: one call reaches the service, nothing is created.
func TestRateLimitNotRetriedByInsert(t *testing.T) {
	e := newEnv(t, 1)
	e.sim.RateLimit(1)
	_, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "limited", nil))
	wantAPIError(t, err, 429, ReasonRateLimitExceeded)
	if n := e.sim.InsertCalls(); n != 1 {
		t.Fatalf("insert calls = %d, want 1 (the client retried a 429)", n)
	}
	if n := e.sim.Instances(zoneA); n != 0 {
		t.Fatalf("%d instances after a 429", n)
	}
	e.insertRunning(t, instanceReq(zoneA, "limited", nil))
	if n := e.sim.InsertCalls(); n != 2 {
		t.Errorf("insert calls = %d, want 2", n)
	}
}

// The same requestId answers the first operation and creates nothing more; another
// requestId for the same name is a 409.
func TestInsertRequestIDIdempotent(t *testing.T) {
	e := newEnv(t, 2)
	req := instanceReq(zoneA, "once", nil)
	req.RequestId = proto.String("6f1c9a52-3b1e-4d6a-9a43-0e2b7c1d5f00")
	first, err := e.ic.Insert(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.ic.Insert(e.ctx, req)
	if err != nil {
		t.Fatalf("retried insert: %v", err)
	}
	if first.Name() != again.Name() {
		t.Fatalf("operations %q and %q: the retry was not recognised", first.Name(), again.Name())
	}
	if err := again.Wait(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.Instances(zoneA); n != 1 {
		t.Fatalf("%d instances, want 1", n)
	}
	req.RequestId = proto.String("0c4d2e8b-7a51-4f3e-8d2c-5b9e1a6f3c11")
	_, err = e.ic.Insert(e.ctx, req)
	wantAPIError(t, err, 409, ReasonAlreadyExists)
}

// Preemption stops the proxy; with instanceTerminationAction DELETE the instance is gone,
// otherwise it is TERMINATED without natIP.
func TestPreemption(t *testing.T) {
	tests := []struct {
		action string
		gone   bool
	}{
		{action: "DELETE", gone: true},
		{action: "STOP", gone: false},
	}
	for _, tt := range tests {
		t.Run(tt.action, func(t *testing.T) {
			e := newEnv(t, 1)
			req := instanceReq(zoneB, "spot", nil)
			req.InstanceResource.Scheduling = &computepb.Scheduling{
				ProvisioningModel:         proto.String("SPOT"),
				InstanceTerminationAction: proto.String(tt.action),
			}
			ip := natIP(e.insertRunning(t, req))
			if err := e.sim.Preempt(zoneB, "spot"); err != nil {
				t.Fatal(err)
			}
			if !refused(proxyAddr(ip)) {
				t.Errorf("the proxy still listens after preemption")
			}
			if tt.gone {
				e.wantGone(t, zoneB, "spot")
				e.insertRunning(t, instanceReq(zoneB, "next", nil)) // the address is free
				return
			}
			inst := e.get(t, zoneB, "spot")
			if inst.GetStatus() != StatusTerminated || natIP(inst) != "" {
				t.Fatalf("status %q natIP %q, want TERMINATED without natIP", inst.GetStatus(), natIP(inst))
			}
			del, err := e.ic.Delete(e.ctx, &computepb.DeleteInstanceRequest{Project: project, Zone: zoneB, Instance: "spot"})
			if err != nil {
				t.Fatal(err)
			}
			if err := del.Wait(e.ctx); err != nil {
				t.Fatal(err)
			}
			e.wantGone(t, zoneB, "spot")
		})
	}
	e := newEnv(t, 1)
	if err := e.sim.Preempt(zoneA, "nothing"); err == nil {
		t.Error("preempting a missing instance succeeded")
	}
}

// When the instance's proxy cannot listen (its address:port is taken), the insert fails as an
// internal error rather than reporting a RUNNING instance nobody can reach.
func TestProxyListenFailureFailsInsert(t *testing.T) {
	e := newEnv(t, 1)
	taken, err := net.Listen("tcp", proxyAddr(pool(1)[0].String()))
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	op, err := e.ic.Insert(e.ctx, instanceReq(zoneA, "blocked", nil))
	if err != nil {
		t.Fatal(err)
	}
	wantAPIError(t, op.Wait(e.ctx), 500, "")
	if errs := op.Proto().GetError().GetErrors(); len(errs) != 1 || errs[0].GetCode() != CodeInternalError {
		t.Fatalf("operation errors = %v", errs)
	}
	e.wantGone(t, zoneA, "blocked")
}
