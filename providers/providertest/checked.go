package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/egressd/egressd/providers"
)

// checked vets every call the suite makes, so each subtest also checks the rules that hold
// for every answer (classified errors, no secrets, Running only with an address) without
// repeating them. It reports with Errorf, which is safe from the suite's goroutines.
type checked struct {
	t *testing.T
	p providers.Provider
}

func (c *checked) Create(ctx context.Context, req providers.CreateRequest) (providers.Instance, error) {
	inst, err := c.p.Create(ctx, req)
	c.vetErr("Create", req.Name, err)
	if errors.Is(err, providers.ErrNotFound) {
		c.t.Errorf("Create(%s) returned ErrNotFound, which the contract forbids: %v", req.Name, err)
	}
	if err == nil {
		c.vetInstance("Create", inst)
	}
	return inst, err
}

func (c *checked) Get(ctx context.Context, id string) (providers.Instance, error) {
	inst, err := c.p.Get(ctx, id)
	c.vetErr("Get", id, err)
	if err == nil {
		c.vetInstance("Get", inst)
		if inst.ID != id {
			c.t.Errorf("Get(%q) returned an instance with ID %q", id, inst.ID)
		}
	}
	return inst, err
}

func (c *checked) Delete(ctx context.Context, id string) error {
	err := c.p.Delete(ctx, id)
	c.vetErr("Delete", id, err)
	return err
}

func (c *checked) List(ctx context.Context) ([]providers.Instance, error) {
	list, err := c.p.List(ctx)
	c.vetErr("List", "", err)
	seen := make(map[string]bool, len(list))
	for _, inst := range list {
		c.vetInstance("List", inst)
		// GC deletes what List returns, so an unmarked entry would delete someone else's VM.
		if !inst.Marks.Managed {
			c.t.Errorf("List returned %s without the managed mark", inst.ID)
		}
		if inst.Name == "" {
			c.t.Errorf("List returned %s without a name", inst.ID)
		}
		if seen[inst.ID] {
			c.t.Errorf("List returned %s twice", inst.ID)
		}
		seen[inst.ID] = true
	}
	return list, err
}

func (c *checked) vetErr(op, subject string, err error) {
	if err == nil {
		return
	}
	if !classified(err) {
		c.t.Errorf("%s(%s) returned an unclassified error (%T): %v", op, subject, err, err)
	}
	if leak := leaked(err.Error(), fmt.Sprintf("%+v %#v", err, err)); leak != "" {
		c.t.Errorf("%s(%s) returned an error that contains %s", op, subject, leak)
	}
}

func (c *checked) vetInstance(op string, inst providers.Instance) {
	if inst.ID == "" {
		c.t.Errorf("%s returned an instance without an ID: %+v", op, inst)
	}
	switch inst.State {
	case providers.StateProvisioning, providers.StateStopped, providers.StateTerminated:
	case providers.StateRunning:
		if inst.Address == "" {
			c.t.Errorf("%s reported %s Running without an address", op, inst.ID)
		}
	default:
		c.t.Errorf("%s reported %s in unknown state %q; unknown backend states must map to Stopped", op, inst.ID, inst.State)
	}
	js, _ := json.Marshal(inst)
	if leak := leaked(fmt.Sprintf("%v %+v %#v", inst, inst, inst), string(js)); leak != "" {
		c.t.Errorf("%s returned an instance that contains %s", op, leak)
	}
}

// classified accepts the four classes and bare context errors, which ClassOf documents as
// Transient: a provider may hand ctx.Err() back unwrapped.
func classified(err error) bool {
	for _, class := range []error{providers.ErrNotFound, providers.ErrQuota, providers.ErrTransient,
		providers.ErrPermanent, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, class) {
			return true
		}
	}
	return false
}

// leaked names the sentinel found in any of texts, or returns "".
func leaked(texts ...string) string {
	for _, s := range texts {
		switch {
		case strings.Contains(s, SentinelUserData):
			return "the request's user-data"
		case strings.Contains(s, SentinelPassword):
			return "the request's auth password"
		}
	}
	return ""
}
