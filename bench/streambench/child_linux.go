package streambench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel stop the child broker when this process
// dies without stopping it (a kill, a crash): it never outlives the run.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
