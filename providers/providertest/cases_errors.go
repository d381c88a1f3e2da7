package providertest

import (
	"context"
	"errors"
	"slices"

	"github.com/egressd/egressd/providers"
)

// Every error drives the reconciler through its class and may end up in status and logs, so
// each must carry a class and never the request's secrets. The checks themselves live in
// checked; this subtest provokes one error of every kind so they run.
func testErrorsAreClassifiedAndRedacted(e *env) {
	// Requests no backend can serve must fail as Permanent before reaching it; a name with a
	// separator would otherwise forge another instance's ID or path.
	for _, c := range []struct {
		what   string
		mutate func(*providers.CreateRequest)
	}{
		{"an empty name", func(r *providers.CreateRequest) { r.Name = "" }},
		{"a name holding a separator", func(r *providers.CreateRequest) { r.Name = "x/../" + r.Name }},
		{"a negative port", func(r *providers.CreateRequest) { r.Port = -1 }},
		{"a port above 65535", func(r *providers.CreateRequest) { r.Port = 65536 }},
	} {
		req := e.request("invalid")
		c.mutate(&req)
		e.track(req.Name)
		if inst, err := e.p.Create(e.ctx, req); !errors.Is(err, providers.ErrPermanent) {
			e.t.Errorf("Create with %s = (%s %s, %v), want ErrPermanent", c.what, inst.ID, inst.State, err)
		}
	}

	req := e.request("errors")
	inst := e.create(req)
	e.delete(inst.ID)
	e.gone(inst.ID)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	var errs []error
	_, err := e.p.Create(cancelled, req)
	errs = append(errs, err)
	_, err = e.p.Get(cancelled, inst.ID)
	errs = append(errs, err)
	_, err = e.p.List(cancelled)
	errs = append(errs, err)
	_, err = e.p.Get(e.ctx, "garbage")
	errs = append(errs, err)
	errs = append(errs, e.p.Delete(e.ctx, "garbage"))
	if slices.Contains(errs, nil) {
		e.t.Errorf("a call that must fail succeeded: %v", errs)
	}
}

// The reconciler places instances only on hosts the catalog offers, so the harness's host
// must be one of them, and the catalog must be usable as a concurrency map.
func testCatalog(e *env) {
	c, ok := e.raw.(providers.Cataloger)
	if !ok {
		e.t.Fatalf("%T does not implement providers.Cataloger", e.raw)
	}
	cat := c.Catalog()
	if cat.Type == "" {
		e.t.Error("Catalog().Type is empty")
	}
	if len(cat.Hosts) == 0 {
		e.t.Error("Catalog().Hosts is empty")
	}
	seen := map[string]bool{}
	for _, h := range cat.Hosts {
		if h.Name == "" {
			e.t.Error("Catalog() has a host without a name")
		}
		if seen[h.Name] {
			e.t.Errorf("Catalog() lists host %q twice", h.Name)
		}
		seen[h.Name] = true
		if h.MaxConcurrentOps < 0 {
			e.t.Errorf("Catalog() host %q has MaxConcurrentOps %d", h.Name, h.MaxConcurrentOps)
		}
	}
	if req := e.request("catalog"); req.Host != "" && !seen[req.Host] {
		e.t.Errorf("Harness.Request uses host %q, which Catalog() does not offer", req.Host)
	}
}
