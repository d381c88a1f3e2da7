package gcp

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// The ingress rule that opens a proxy port: one per installation, provider entry, network and
// port, named and tagged egressd-<16 base32 of sha256(installation/provider/network/port)>:
// each provider entry lists (and so counts the users of) only its own VMs. Instances that need it
// carry the name as a network tag (what the rule targets) and as their egressd-firewall
// label (how Delete finds the instances that still use it). Its description holds its marks,
// since firewall rules have no labels.
type firewallMarks struct {
	Managed      bool   `json:"egressdManaged"`
	Installation string `json:"installation"`
	Provider     string `json:"provider"`
	Network      string `json:"network"`
	Port         int    `json:"port"`
}

var ruleEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func (p *Provider) ruleName(installation string, port int) string {
	sum := sha256.Sum256([]byte(installation + "/" + p.name + "/" + p.cfg.Network + "/" + strconv.Itoa(port)))
	return "egressd-" + strings.ToLower(ruleEncoding.EncodeToString(sum[:]))[:16]
}

func (p *Provider) networkURL() string { return "global/networks/" + p.cfg.Network }

// ensureFirewall makes sure the rule for port exists, and returns its name. Callers hold its
// lock (p.firewalls), and before they release it register as its users (p.ruleUsers) until
// their VM is listed, so that a Delete collecting the rule in this process cannot remove it
// under them.
func (p *Provider) ensureFirewall(ctx context.Context, c *clients, installation string, port int) (string, error) {
	name := p.ruleName(installation, port)
	want := firewallMarks{Managed: true, Installation: installation, Provider: p.name, Network: p.cfg.Network, Port: port}
	if err := p.checkRule(ctx, c, name, want); err == nil {
		return name, nil
	} else if !isCode(err, http.StatusNotFound) {
		return "", err
	}
	desc, _ := json.Marshal(want)
	rule := &computepb.Firewall{
		Name:         proto.String(name),
		Network:      proto.String(p.networkURL()),
		Direction:    proto.String("INGRESS"),
		Allowed:      []*computepb.Allowed{{IPProtocol: proto.String("tcp"), Ports: []string{strconv.Itoa(port)}}},
		TargetTags:   []string{name},
		SourceRanges: p.cfg.Firewall.SourceRanges,
		Description:  proto.String(string(desc)),
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	op, err := c.fw.Insert(cctx, &computepb.InsertFirewallRequest{Project: p.cfg.Project, FirewallResource: rule})
	switch {
	case isCode(err, http.StatusConflict):
		// Another process made it meanwhile: it must be ours too.
		return name, p.checkRule(ctx, c, name, want)
	case err != nil:
		return "", fmt.Errorf("firewall rule %s: %w", name, err)
	}
	if err := waitOp(cctx, op); err != nil {
		return "", fmt.Errorf("firewall rule %s: %w", name, err)
	}
	p.log.Info("gcp firewall rule created", "rule", name, "network", p.cfg.Network, "port", port)
	return name, nil
}

// checkRule reads the rule and refuses one whose marks are not want's.
func (p *Provider) checkRule(ctx context.Context, c *clients, name string, want firewallMarks) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	fw, err := c.fw.Get(cctx, &computepb.GetFirewallRequest{Project: p.cfg.Project, Firewall: name})
	if err != nil {
		return err
	}
	var got firewallMarks
	if json.Unmarshal([]byte(fw.GetDescription()), &got) != nil || got.Installation != want.Installation || got.Provider != p.name || !got.Managed {
		return fmt.Errorf("%w: firewall rule %s exists without the marks of this installation and provider; egressd does not use or change it", errForeignFirewall, name)
	}
	return nil
}

// collectFirewall deletes the rule if no instance uses it any more. A list it cannot vouch
// for (a zone unreachable) keeps the rule.
func (p *Provider) collectFirewall(ctx context.Context, c *clients, name, installation string) error {
	unlock, err := p.firewalls.Lock(ctx, name)
	if err != nil {
		return err
	}
	defer unlock()
	if p.ruleUsers.busy(name) {
		return nil // a Create of this process is inserting a VM that needs it
	}
	users, err := p.listInstances(ctx, c, labelFirewall+` = "`+name+`"`)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return nil
	}
	if err := p.checkRule(ctx, c, name, firewallMarks{Managed: true, Installation: installation}); err != nil {
		if isCode(err, http.StatusNotFound) {
			return nil
		}
		return err
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	op, err := c.fw.Delete(cctx, &computepb.DeleteFirewallRequest{Project: p.cfg.Project, Firewall: name})
	if isCode(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("firewall rule %s: %w", name, err)
	}
	if err := waitOp(cctx, op); err != nil {
		return fmt.Errorf("firewall rule %s: %w", name, err)
	}
	p.log.Info("gcp firewall rule deleted: no instance uses it", "rule", name)
	return nil
}

// waitOp waits for an operation and reads its error: Wait returns nil for a DONE operation
// that carries only error.errors[] (no httpErrorStatusCode).
// The operation's own error wins over Wait's (which says only the HTTP status).
func waitOp(ctx context.Context, op *compute.Operation) error {
	err := op.Wait(ctx)
	if op.Done() {
		if oe := operationError(op.Proto()); oe != nil {
			return oe
		}
	}
	return err
}

// operationError is a DONE operation's error, nil when it has none.
func operationError(op *computepb.Operation) error {
	if oe := opErrorOf(op); oe != nil {
		return oe
	}
	return nil
}

// opErrorOf is operationError as its type.
func opErrorOf(op *computepb.Operation) *opError {
	errs := op.GetError().GetErrors()
	if len(errs) == 0 {
		return nil
	}
	return &opError{Op: op.GetName(), Code: errs[0].GetCode(), Message: errs[0].GetMessage(), HTTPStatus: int(op.GetHttpErrorStatusCode())}
}

// ruleUsers counts the Creates in flight per firewall rule.
type ruleUsers struct {
	mu sync.Mutex
	n  map[string]int
}

// hold counts one more user of rule until the returned func is called.
func (r *ruleUsers) hold(rule string) func() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[rule]++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.n[rule]--; r.n[rule] == 0 {
			delete(r.n, rule)
		}
	}
}

func (r *ruleUsers) busy(rule string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[rule] > 0
}
