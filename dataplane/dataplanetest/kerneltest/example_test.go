package kerneltest_test

import (
	"testing"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	v1 "k8s.io/api/core/v1"
)

// newMyDataplane stands for a vendor's constructor.
func newMyDataplane(v1.IPFamily) (dataplane.Dataplane, error) {
	return dataplanetest.NewRecorder("mine"), nil
}

// Example is the body of a vendor's kernel conformance test: every case a
// lab can send, in each pod-network shape, one fresh lab per scenario, the
// scenarios in parallel (they mostly wait for the connections a Drop
// swallows). It needs root; as an example it is compiled, not run.
func Example() {
	var t *testing.T // the test's own
	for _, n := range kerneltest.PodNetworks {
		t.Run(n.String(), func(t *testing.T) {
			scenarios := dataplanetest.Filter(dataplanetest.Scenarios(), n.Reproducible)
			dataplanetest.RunScenarios(t, scenarios, func(t *testing.T) dataplanetest.Harness {
				t.Parallel()
				return kerneltest.New(t, kerneltest.Config{New: newMyDataplane, PodNetwork: n})
			})
		})
	}
}
