package nftnl_test

import (
	"github.com/go-logr/logr/testr"
	"os"
	"testing"

	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"github.com/proxykit/proxykit/internal/netns"
	"sigs.k8s.io/knftables"
)

// kernelNS is a namespace for one test with a Conn to its table.
type kernelNS struct {
	*netns.NS
	conn *nftnl.Conn
}

// newKernelNS makes a namespace (skipping the test without root and nft)
// and opens a Conn to table proxykit of family in it.
func newKernelNS(t *testing.T, family knftables.Family) *kernelNS {
	t.Helper()
	netns.Require(t, "nft")
	ns := netns.New(t, "nftnl")
	f, err := os.Open("/var/run/netns/" + ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftnl.Open(family, table, nftnl.Options{NetNS: f, Logger: testr.NewWithOptions(t, testr.Options{Verbosity: 4})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &kernelNS{NS: ns, conn: c}
}

const table = "proxykit"

// listing is what nft shows of the table: its listing and its bytecode.
func (k *kernelNS) listing(t *testing.T, family knftables.Family) (text, bytecode string) {
	t.Helper()
	text = k.MustRun("nft", "list", "table", string(family), table)
	bytecode = k.MustRun("nft", "--debug=netlink", "list", "table", string(family), table)
	return text, bytecode
}
