package images_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/proxykit/proxykit/test/e2e/build"
	"github.com/proxykit/proxykit/test/e2e/images"
)

// The images go beside the binaries, and every node's containerd imports
// them into the namespace kubelet uses.
func ExampleBuild() {
	ctx := context.Background()
	bins, err := build.Build(ctx, build.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	cache, err := build.DefaultCacheDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	tarballs, err := images.Build(ctx, filepath.Join(cache, "images"), bins)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	for _, t := range tarballs {
		// In a node's mount namespace, where its containerd's socket is.
		_ = exec.CommandContext(ctx, "ctr", "-n", "k8s.io", "images", "import", t).Run()
	}
}
