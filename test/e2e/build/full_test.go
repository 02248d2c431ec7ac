package build

import (
	"context"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestBuildAll builds (or finds in the cache) every binary, as the e2e
// command does. It is opt-in: cold, it takes half an hour.
func TestBuildAll(t *testing.T) {
	if os.Getenv("PROXYKIT_E2E_BUILD") != "1" {
		t.Skip("set PROXYKIT_E2E_BUILD=1 to build every binary into the real cache (cold: ~30 min)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Minute)
	defer cancel()
	start := time.Now()
	bins, err := Build(ctx, Options{Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Build took %s", time.Since(start).Round(time.Second))
	v := reflect.ValueOf(bins)
	for i := 0; i < v.NumField(); i++ {
		p := v.Field(i).String()
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm()&0o111 == 0 {
			t.Errorf("Binaries.%s = %q: not an executable (%v)", v.Type().Field(i).Name, p, err)
		}
	}
	for _, c := range [][]string{{bins.Kubelet, "--version"}, {bins.Kubectl, "version", "--client"}} {
		out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), KubernetesVersion) {
			t.Errorf("%s: %q (%v), want %s", strings.Join(c, " "), out, err, KubernetesVersion)
		}
	}
}
