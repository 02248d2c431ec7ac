package nftables

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora
// through the real nft of both families (kerneltest.ReplayCorpora): every
// entry at once (a full sync), then each entry alone, which the same
// dataplanes program as they would any new State. Beyond the replay's own
// checks (nft accepts every transaction, Reconcile finds the table as
// programmed, the valid service is served), the same State again must cost
// nothing.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	netns.Require(t, "nft")
	report := kerneltest.ReplayCorpora(t, kerneltest.CorpusConfig{
		Root: "../..",
		Harness: kerneltest.Config{New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
			return New(Config{Family: family})
		}},
		Check: func(t *testing.T, c kerneltest.CorpusSync) {
			d := c.Dataplane.(*Dataplane)
			if err := c.Node.Do(func() error { return d.Sync(t.Context(), c.State) }); err != nil || d.Stats().Operations != 0 {
				t.Errorf("%s, %s: the same State again: %v, %+v; want a sync doing nothing", c.What, c.State.Family, err, d.Stats())
			}
		},
	})
	t.Logf("%s", report)
}
