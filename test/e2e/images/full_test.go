package images

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/proxykit/proxykit/test/e2e/build"
)

// TestBuildReal writes the images from the real binaries into the real
// cache, timing a first and a second (cached) Build. Opt-in, like
// build.TestBuildAll, whose cache it uses.
func TestBuildReal(t *testing.T) {
	if os.Getenv("PROXYKIT_E2E_BUILD") != "1" {
		t.Skip("set PROXYKIT_E2E_BUILD=1 to build the images from the real binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	bins, err := build.Build(ctx, build.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache, err := build.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, round := range []string{"first", "second"} {
		start := time.Now()
		paths, err := Build(ctx, filepath.Join(cache, "images"), bins)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s Build: %s", round, time.Since(start).Round(10*time.Millisecond))
		for _, p := range paths {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("  %s %d MB", filepath.Base(p), st.Size()>>20)
		}
	}
}
