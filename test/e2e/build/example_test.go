package build_test

import (
	"context"
	"fmt"
	"os"

	"github.com/proxykit/proxykit/test/e2e/build"
)

// Build once before a run: cold, it builds everything (about half an hour
// on two cores); warm, it relinks the agent and returns.
func ExampleBuild() {
	bins, err := build.Build(context.Background(), build.Options{Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(bins.Kubelet, bins.E2E, bins.Agent)
}
