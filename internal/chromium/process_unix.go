//go:build unix

package chromium

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the browser in a process group of its own, so that its renderer,
// GPU and zygote children are killed with it when the timeout cancels the command.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}

// killProcessGroup ends whatever of the browser's group is left; after a clean exit that is
// usually nothing (ESRCH, ignored).
func killProcessGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
