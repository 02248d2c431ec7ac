package vmtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/proxykit/proxykit/internal/vmtest"
)

// Boot without a testing.T: from a tool that wants the console itself.
// (No Output comment: it boots a VM, so `go test` compiles it only.)
func Example() {
	res, err := vmtest.Boot(context.Background(), vmtest.Config{
		Package: "./dataplane/ipvs",
		Run:     "^TestKernel",
		Modules: []string{"ip_vs", "ip_vs_rr", "dummy"},
		Tools:   []string{"iptables-restore", "iptables-save"},
		Timeout: 5 * time.Minute,
	})
	if err != nil {
		fmt.Println("no VM:", err)
		return
	}
	fmt.Println("tests exited with", res.ExitCode)
}
