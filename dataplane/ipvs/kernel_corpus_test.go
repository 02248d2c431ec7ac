package ipvs

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	v1 "k8s.io/api/core/v1"
)

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora
// through IPVS in a node namespace of both families
// (kerneltest.ReplayCorpora): virtual and real servers, the dummy link's
// addresses, the ipsets and the iptables rules. Every Sync must succeed,
// a Reconcile must find what was just synced, and after the corpus a valid
// service must still be served. TestKernelTestsInVM runs it in the VM,
// with the corpora copied in.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	requireIPVS(t)
	report := kerneltest.ReplayCorpora(t, kerneltest.CorpusConfig{
		Root: "../..",
		Harness: kerneltest.Config{New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
			return New(Config{Family: family})
		}},
	})
	t.Logf("%s", report)
}
