package local

import (
	"context"
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/egressd/egressd/providers"
)

// Check reports the one target, "local": Ready when the state dir is writable and at least
// one pool address can be listened on. It never blocks on a lock held by Create or Delete.
func (p *Provider) Check(ctx context.Context) []providers.TargetStatus {
	start := time.Now()
	ts := providers.TargetStatus{
		Name:    hostName,
		Address: p.stateDir,
		Details: map[string]string{"addresses": strconv.Itoa(len(p.pool))},
	}

	if err := p.checkStateDir(); err != nil {
		ts.Reason = providers.CheckUnreachable
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS) {
			ts.Reason = providers.CheckForbidden
		}
		ts.Message = "state dir not writable: " + err.Error()
		return []providers.TargetStatus{finish(ts, start)}
	}
	for _, a := range p.pool {
		if ctx.Err() != nil {
			ts.Reason, ts.Message = "Timeout", "check cancelled: "+ctx.Err().Error()
			return []providers.TargetStatus{finish(ts, start)}
		}
		// Port 0: whether the address is on this host, not whether some port is free.
		if canListen(a, 0) == nil {
			ts.Ready, ts.Reason = true, providers.CheckReachable
			ts.Details["firstUsable"] = a.String()
			return []providers.TargetStatus{finish(ts, start)}
		}
	}
	ts.Reason, ts.Message = "Unreachable", "no pool address can be listened on"
	return []providers.TargetStatus{finish(ts, start)}
}

func finish(ts providers.TargetStatus, start time.Time) providers.TargetStatus {
	ts.Latency = time.Since(start)
	return ts
}

func (p *Provider) checkStateDir() error {
	if err := os.MkdirAll(p.stateDir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(p.stateDir, ".check-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}
