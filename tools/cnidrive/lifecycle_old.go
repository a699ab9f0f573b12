//go:build !libcni11

package main

import "fmt"

// runLifecycle: Debian's packaged libcni (1.1.x) has no GC or STATUS.
func runLifecycle(command, _ string, _ []string) *failure {
	return ownFailure(fmt.Errorf("%s needs CNI 1.1.0: use the module-mode build (cnidrive11)", command))
}
