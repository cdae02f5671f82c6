//go:build !unix

package upstream

import "os/exec"

func setProcessGroup(*exec.Cmd) {}

// signalGroup kills the child: without process groups there is no gentle
// signal to send.
func signalGroup(cmd *exec.Cmd, _ bool) { _ = cmd.Process.Kill() }
