package proxmox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/egressd/egressd/providers"
)

// Check reasons: the shared ones under this provider's names, and its own.
const (
	ReasonReachable                                    = providers.CheckReachable
	ReasonCredentialsUnavailable                       = providers.CheckCredentialsUnavailable
	ReasonUnreachable                                  = providers.CheckUnreachable
	ReasonUnauthorized                                 = providers.CheckUnauthorized
	ReasonForbidden                                    = providers.CheckForbidden
	ReasonTimeout                                      = providers.CheckTimeout
	ReasonStorageNotFound        providers.CheckReason = "StorageNotFound"
	ReasonTemplateNotFound       providers.CheckReason = "TemplateNotFound"
	ReasonAPIError                                     = providers.CheckAPIError
)

var (
	errNoISOStorage = errors.New("ISO storage unusable")
	errTemplates    = errors.New("templates missing")
)

// maxDetail bounds what the API may put in a detail.
const maxDetail = 64

// Check reports one target per node, in config order, checked concurrently; it takes no lock
// of Create or Delete: GET /version, /nodes/{node}/status, the ISO storage's status on the
// node, and the configured templates in the cluster's resources.
func (p *Provider) Check(ctx context.Context) []providers.TargetStatus {
	out := make([]providers.TargetStatus, len(p.cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range p.cfg.Nodes {
		wg.Go(func() { out[i] = p.checkNode(ctx, n.Name) })
	}
	wg.Wait()
	return out
}

func (p *Provider) checkNode(ctx context.Context, node string) providers.TargetStatus {
	start := time.Now()
	ts := providers.TargetStatus{Name: node, Address: apiHost(p.cfg.URL), Details: map[string]string{"isoStorage": p.cfg.ISOStorage}}
	err := p.probeNode(ctx, node, ts.Details)
	ts.Latency = time.Since(start)
	if err == nil {
		ts.Ready, ts.Reason = true, ReasonReachable
	} else {
		ts.Reason, ts.Message = checkReason(ctx, err), err.Error()
	}
	p.log.Debug("proxmox node checked", "node", node, "ready", ts.Ready, "reason", ts.Reason, "latency", ts.Latency)
	return ts
}

func (p *Provider) probeNode(ctx context.Context, node string, details map[string]string) error {
	v, err := p.api.version(ctx)
	if err != nil {
		return err
	}
	details["pveVersion"] = clip(v.Version)
	ns, err := p.api.nodeStatus(ctx, node)
	if err != nil {
		return err
	}
	details["kernel"] = clip(ns.KVersion)
	st, err := p.api.storageStatus(ctx, node, p.cfg.ISOStorage)
	// A storage not defined is a parameter error on "storage" (400); one defined but not on
	// this node or not active, a 500.
	if ae, ok := apiErr(err); ok && (ae.Status == http.StatusInternalServerError || (ae.Status == http.StatusBadRequest && ae.Errors["storage"] != "")) {
		return fmt.Errorf("%w: %s on %s: %w", errNoISOStorage, p.cfg.ISOStorage, node, err)
	}
	if err != nil {
		return err
	}
	details["isoStorageAvailGiB"] = fmt.Sprintf("%.1f", float64(st.Avail)/(1<<30))
	if !hasContent(st.Content, "iso") {
		return fmt.Errorf("%w: %s on %s holds content %q, not iso", errNoISOStorage, p.cfg.ISOStorage, node, st.Content)
	}
	res, err := p.api.resources(ctx)
	if err != nil {
		return err
	}
	found, missing := 0, []string{}
	for _, key := range slices.Sorted(maps.Keys(p.cfg.Templates)) {
		if _, ok := findVMID(res, p.cfg.Templates[key].VMID); ok {
			found++
		} else {
			missing = append(missing, key+" ("+strconv.Itoa(p.cfg.Templates[key].VMID)+")")
		}
	}
	details["templates"] = fmt.Sprintf("%d/%d", found, len(p.cfg.Templates))
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not in the cluster", errTemplates, strings.Join(missing, ", "))
	}
	return nil
}

// checkReason names why a node check failed. The round's own deadline wins over the stage.
func checkReason(ctx context.Context, err error) providers.CheckReason {
	ae, isAPI := apiErr(err)
	switch {
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.Is(err, errTokenUnreadable), errors.Is(err, errTokenMalformed):
		return ReasonCredentialsUnavailable
	case errors.Is(err, errNoISOStorage):
		return ReasonStorageNotFound
	case errors.Is(err, errTemplates):
		return ReasonTemplateNotFound
	case isAPI && ae.Status == http.StatusUnauthorized:
		return ReasonUnauthorized
	case isAPI && ae.Status == http.StatusForbidden:
		return ReasonForbidden
	case isAPI:
		return ReasonAPIError
	}
	return ReasonUnreachable
}

func hasContent(list, want string) bool {
	for _, c := range strings.Split(list, ",") {
		if strings.TrimSpace(c) == want {
			return true
		}
	}
	return false
}

func clip(s string) string {
	if len(s) > maxDetail {
		return s[:maxDetail]
	}
	return s
}

// apiHost is the API's host:port, the one address a check reports.
func apiHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}
