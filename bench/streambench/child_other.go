//go:build !linux

package streambench

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere Stop is
// the only way the child ends.
func dieWithParent(*exec.Cmd) {}
