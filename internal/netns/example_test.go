package netns_test

import (
	"testing"

	"github.com/proxykit/proxykit/internal/netns"
)

// Example is the shape of every kernel test: check for root and tools, make
// namespaces, wire them, and let the test's end delete them. It needs root;
// as an example it is compiled, not run.
func Example() {
	var t *testing.T // the test's own
	netns.Require(t, "ping")
	a, b := netns.New(t, "a"), netns.New(t, "b")
	netns.Veth(t, a, "eth0", []string{"10.0.0.1/24"}, b, "eth0", []string{"10.0.0.2/24"})
	a.MustRun("ping", "-c1", "-W1", "10.0.0.2")
}
