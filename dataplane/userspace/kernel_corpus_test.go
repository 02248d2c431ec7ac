package userspace

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
)

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora
// through redirect mode in a node namespace of both families
// (kerneltest.ReplayCorpora): the forwarders' sockets and the REDIRECT
// rules iptables-restore writes. Every Sync must succeed, a Reconcile must
// find the rules as written, and after the corpus a valid service must
// still be proxied to its endpoint.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save")
	report := kerneltest.ReplayCorpora(t, kerneltest.CorpusConfig{
		Root: "../..",
		Harness: kerneltest.Config{
			New: func(family v1.IPFamily) (dataplane.Dataplane, error) {
				dialer, err := dialerHere()
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { dialer.ns.Close() })
				return New(Config{Family: family, Redirect: &RedirectConfig{}, Dialer: dialer, Logger: logr.Discard()})
			},
			Proxy: true,
		},
	})
	t.Logf("%s", report)
}
