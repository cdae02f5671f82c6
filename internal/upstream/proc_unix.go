//go:build unix

package upstream

import (
	"os/exec"
	"syscall"
)

// setProcessGroup puts the child in its own process group, so that
// signalGroup reaches everything it spawned and a signal sent to the
// gateway's group (Ctrl-C) does not reach it before the gateway's own
// shutdown does.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGTERM (or SIGKILL) to the child's process group.
func signalGroup(cmd *exec.Cmd, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil {
		_ = cmd.Process.Signal(sig)
	}
}
