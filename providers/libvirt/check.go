package libvirt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"golang.org/x/crypto/ssh"

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
	ReasonPoolNotFound           providers.CheckReason = "PoolNotFound"
	ReasonPoolNotActive          providers.CheckReason = "PoolNotActive"
	ReasonAPIError                                     = providers.CheckAPIError
)

// maxDetail bounds what a host may put in a detail, its host name.
const maxDetail = 64

// Check reports one target per host, in config order, checked concurrently, each on a
// connection of its own (never the pooled one, and never waiting for a lock of Create or
// Delete): dial, ConnectGetLibVersion, ConnectGetHostname, StoragePoolLookupByName,
// StoragePoolGetInfo, close.
func (p *Provider) Check(ctx context.Context) []providers.TargetStatus {
	hosts := p.orderedHosts()
	out := make([]providers.TargetStatus, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { out[i] = p.checkHost(ctx, h) })
	}
	wg.Wait()
	return out
}

func (p *Provider) checkHost(ctx context.Context, h *hostConns) providers.TargetStatus {
	start := time.Now()
	ts := providers.TargetStatus{
		Name:    h.cfg.Name,
		Address: h.cfg.Address,
		Details: map[string]string{"user": h.cfg.User, "pool": h.cfg.Pool},
	}
	err := p.probeHost(ctx, h, ts.Details)
	ts.Latency = time.Since(start)
	if err == nil {
		ts.Ready, ts.Reason = true, ReasonReachable
	} else {
		ts.Reason, ts.Message = checkReason(ctx, err), err.Error()
	}
	p.log.Debug("libvirt host checked", "host", h.cfg.Name, "ready", ts.Ready, "reason", ts.Reason, "latency", ts.Latency)
	return ts
}

func (p *Provider) probeHost(ctx context.Context, h *hostConns, details map[string]string) error {
	c, err := h.fresh(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.LibVersion(ctx)
	if err != nil {
		return err
	}
	details["libvirtVersion"] = fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
	hostname, err := c.Hostname(ctx)
	if err != nil {
		return err
	}
	if len(hostname) > maxDetail {
		hostname = hostname[:maxDetail]
	}
	details["hostname"] = hostname
	pool, err := c.LookupPool(ctx, h.cfg.Pool)
	if err != nil {
		return err
	}
	info, err := c.PoolInfo(ctx, pool)
	if err != nil {
		return err
	}
	details["poolState"] = poolStateWord(info.State)
	details["poolCapacityGiB"] = fmt.Sprintf("%.1f", float64(info.Capacity)/(1<<30))
	details["poolAvailableGiB"] = fmt.Sprintf("%.1f", float64(info.Available)/(1<<30))
	if info.State != golibvirt.StoragePoolRunning {
		return fmt.Errorf("%w: storage pool %s is %s", errPoolDown, h.cfg.Pool, poolStateWord(info.State))
	}
	return nil
}

// checkReason names why a host check failed. The round's own deadline wins over the stage:
// a check cut short says nothing about the host.
func checkReason(ctx context.Context, err error) providers.CheckReason {
	var (
		de      *dialError
		openErr *ssh.OpenChannelError
	)
	switch {
	case ctx.Err() != nil:
		return ReasonTimeout
	case errors.Is(err, errPoolDown):
		return ReasonPoolNotActive
	case errors.As(err, &de) && de.Stage == stageCredentials:
		return ReasonCredentialsUnavailable
	case errors.As(err, &de) && de.Stage == stageSSH && (errors.Is(err, errHostKey) || errors.Is(err, errAuthRefused)):
		return ReasonUnauthorized
	case errors.As(err, &openErr) && openErr.Reason == ssh.Prohibited:
		return ReasonForbidden
	case isCode(err, golibvirt.ErrAccessDenied), isCode(err, golibvirt.ErrAuthFailed), isCode(err, golibvirt.ErrOperationDenied):
		return ReasonForbidden
	case errors.As(err, &de):
		return ReasonUnreachable
	case errors.Is(err, errBudget), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case isCode(err, golibvirt.ErrNoStoragePool):
		return ReasonPoolNotFound
	}
	if _, ok := libvirtCode(err); ok {
		return ReasonAPIError
	}
	return ReasonUnreachable
}
