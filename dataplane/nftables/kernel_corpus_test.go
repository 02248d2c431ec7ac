package nftables

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// corpusBuilder feeds objects to a dual-stack Builder as a source would,
// giving every decoded Service a ready local endpoint per family so that
// its chains are written.
type corpusBuilder struct {
	b        *dataplane.Builder
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]*discovery.EndpointSlice
}

func newCorpusBuilder() *corpusBuilder {
	f := &corpusBuilder{services: map[types.NamespacedName]*v1.Service{}, slices: map[types.NamespacedName]*discovery.EndpointSlice{}}
	f.b = dataplane.NewBuilder(dataplane.BuilderConfig{
		Families:  []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName:  fuzzobj.SliceNode,
		ProxyName: fuzzobj.ProxyName,
		Settings:  dataplanetest.DefaultSettings(),
		Logger:    funcr.New(func(string, string) {}, funcr.Options{}),
	})
	f.b.UpdateNode(dataplanetest.TestNode(func(n *v1.Node) { n.Name = fuzzobj.SliceNode }))
	return f
}

func (f *corpusBuilder) feed(objs fuzzobj.Objects) {
	slice := func(s *discovery.EndpointSlice) {
		nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		f.b.UpdateEndpointSlice(f.slices[nn], s)
		f.slices[nn] = s
	}
	for _, s := range objs.Services {
		nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		f.b.UpdateService(f.services[nn], s)
		f.services[nn] = s
		for i, ip := range []string{"10.180.0.1", "fd00:180::1"} {
			slice(dataplanetest.MakeSlice(s.Namespace, s.Name, 4+2*i, func(es *discovery.EndpointSlice) {
				if i == 1 {
					es.AddressType = discovery.AddressTypeIPv6
				}
				for _, p := range s.Spec.Ports {
					proto := p.Protocol
					if proto == "" {
						proto = v1.ProtocolTCP
					}
					es.Ports = append(es.Ports, dataplanetest.SlicePort(p.Name, proto, 8080))
				}
				es.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(ip, fuzzobj.SliceNode)}
			}))
		}
	}
	for _, s := range objs.Slices {
		slice(s)
	}
}

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora
// through the Builder into the real nft of both families: every entry at
// once (a full sync), then each entry alone in a fresh Builder, which the
// same dataplanes program as they would any new State. nft must accept
// every transaction, the same State again must cost nothing, and a
// Reconcile must find the table as programmed.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	netns.Require(t, "nft")
	entries, err := fuzzobj.ModelCorpora("../..")
	if err != nil {
		t.Fatal(err)
	}
	ns := netns.New(t, "corpus")
	dps := map[v1.IPFamily]*Dataplane{}
	if err := ns.Do(func() error {
		for _, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			d, err := New(Config{Family: fam})
			if err != nil {
				return err
			}
			dps[fam] = d
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	replay := func(what string, b *dataplane.Builder) {
		t.Helper()
		for _, s := range b.Build().States {
			d := dps[s.Family]
			err := ns.Do(func() error {
				if err := d.Sync(ctx, s); err != nil {
					return fmt.Errorf("the kernel rejected what the model built: %w", err)
				}
				if err := d.Sync(ctx, s); err != nil || d.Stats().Operations != 0 {
					return fmt.Errorf("the same State again: %v, %+v; want a sync doing nothing", err, d.Stats())
				}
				drift, err := d.Reconcile(ctx)
				if err == nil && !drift.Empty() {
					err = fmt.Errorf("Reconcile of what was just synced found drift: %s", drift)
				}
				return err
			})
			if err != nil {
				t.Errorf("%s, %s: %v", what, s.Family, err)
			}
		}
	}
	all := newCorpusBuilder()
	for _, e := range entries {
		all.feed(e.Objects)
	}
	replay("all entries", all.b)
	for _, e := range entries {
		f := newCorpusBuilder()
		f.feed(e.Objects)
		replay(e.Name, f.b)
	}
	t.Logf("%d entries replayed", len(entries))
}
