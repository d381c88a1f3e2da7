package local

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"

	"github.com/egressd/egressd/providers"
)

func TestClassify(t *testing.T) {
	p := &Provider{name: "local"}
	for _, c := range []struct {
		op   string
		err  error
		want error
	}{
		{"get", errNoInstance, providers.ErrNotFound},
		{"create", errNoInstance, providers.ErrTransient}, // Create never says NotFound
		{"create", fmt.Errorf("x: %w", errPoolExhausted), providers.ErrQuota},
		{"create", fmt.Errorf("%w: in use", syscall.EADDRINUSE), providers.ErrQuota},
		{"create", syscall.ENOSPC, providers.ErrQuota},
		{"create", fmt.Errorf("mkdir: %w", syscall.EACCES), providers.ErrPermanent},
		{"create", syscall.EROFS, providers.ErrPermanent},
		{"create", syscall.EADDRNOTAVAIL, providers.ErrPermanent},
		{"get", errBadID, providers.ErrPermanent},
		{"create", errBadRequest, providers.ErrPermanent},
		{"create", errConflict, providers.ErrPermanent},
		{"create", fmt.Errorf("%w: %w", errBinary, exec.ErrNotFound), providers.ErrPermanent},
		{"create", errStartTimeout, providers.ErrTransient},
		{"delete", errBusy, providers.ErrTransient},
		{"get", errCorrupt, providers.ErrTransient},
		{"list", context.Canceled, providers.ErrTransient},
		{"create", errors.New("something else"), providers.ErrTransient},
		{"create", providers.Errorf(providers.ErrQuota, "create", "other", "x", "kept"), providers.ErrQuota},
	} {
		got := p.classify(c.op, "local/x", c.err)
		if !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("classify(%s, %v) = %v, want class %v and the cause kept", c.op, c.err, got, c.want)
		}
	}
	if p.classify("get", "x", nil) != nil {
		t.Error("classify(nil) != nil")
	}
}

func TestStartError(t *testing.T) {
	ctx := context.Background()
	exit := func(code int) error {
		err := exec.Command("sh", "-c", fmt.Sprintf("exit %d", code)).Run()
		if err == nil && code != 0 {
			t.Fatal("sh did not fail")
		}
		return err
	}
	p := &Provider{name: "local"}
	for code, want := range map[int]error{
		3: providers.ErrQuota,     // address in use
		4: providers.ErrPermanent, // permission
		5: providers.ErrPermanent, // address not on this host
		2: providers.ErrPermanent, // usage
		6: providers.ErrTransient, // not ready
		1: providers.ErrTransient,
	} {
		got := p.classify("create", "local/x", startError(ctx, exit(code), "detail"))
		if !errors.Is(got, want) {
			t.Errorf("exit %d: %v, want %v", code, got, want)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if got := p.classify("create", "x", startError(cancelled, exit(9), "")); !errors.Is(got, providers.ErrTransient) {
		t.Errorf("cancelled start: %v", got)
	}
}
