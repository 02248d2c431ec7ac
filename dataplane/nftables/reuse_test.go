package nftables

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"net/netip"
	"sigs.k8s.io/knftables"
	"slices"
)

// recordingNFT is a fake that records the text of every transaction and
// refuses them while fail is set.
type recordingNFT struct {
	*knftables.Fake
	txs  *[]string
	fail *bool
}

func (r recordingNFT) Run(ctx context.Context, tx *knftables.Transaction) error {
	*r.txs = append(*r.txs, tx.String())
	if *r.fail {
		return errors.New("refused")
	}
	return r.Fake.Run(ctx, tx)
}

// reuseStep is one sync of TestFullSyncReusesRenderings.
type reuseStep struct {
	state *dataplane.State
	fail  bool
	after time.Duration
}

// TestFullSyncReusesRenderings: a Dataplane that renders again only the
// services that changed since its last sync (after failures, and when the
// full sync period runs out) writes exactly what one rendering everything
// every time writes, and reports the same skipped inputs.
func TestFullSyncReusesRenderings(t *testing.T) {
	var steps []reuseStep
	add := func(s *dataplane.State, fail bool, after time.Duration) {
		steps = append(steps, reuseStep{s, fail, after})
	}
	// A State no Builder makes, synced again after a failure: its bad
	// port is reported every time.
	ip := netip.MustParseAddr
	good := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "good"}, Port: "p", Protocol: v1.ProtocolTCP}
	badState := func(eps ...string) *dataplane.State {
		var list []*endpoints.Endpoint
		for _, ep := range eps {
			list = append(list, &endpoints.Endpoint{Addr: netip.MustParseAddrPort(ep), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}})
		}
		return &dataplane.State{
			Family: v1.IPv4Protocol,
			Node:   dataplane.Node{Name: "n", IPs: []netip.Addr{ip("192.168.0.2")}},
			Services: servicemodel.NewMap(
				&servicemodel.ServicePort{Name: good, ClusterIP: ip("172.30.0.1"), Port: 80, Protocol: v1.ProtocolTCP},
				&servicemodel.ServicePort{Name: servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "icmp"}, Port: "p"},
					ClusterIP: ip("172.30.0.4"), Port: 80, Protocol: "ICMP"}),
			Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{good: list}),
		}
	}
	bad, bad2 := badState("10.0.0.1:8080"), badState("10.0.0.1:8080", "10.0.0.2:8080")
	add(bad, false, 0)
	add(bad2, true, time.Second)
	add(bad2, false, time.Second)
	for _, sc := range dataplanetest.Scenarios() {
		if sc.Family == v1.IPv6Protocol {
			continue
		}
		b, st := sc.Build(t)
		add(st, false, 0)
		for _, sl := range sc.Slices {
			b.UpdateEndpointSlice(sl, nil)
			add(b.Build().States[0], false, time.Second)
		}
		for _, sl := range sc.Slices {
			b.UpdateEndpointSlice(nil, sl)
		}
		add(b.Build().States[0], true, time.Second)
		add(b.Build().States[0], false, time.Second)
		// The first deletion fails: the next is a full sync of a
		// State where a service is gone since the last one rendered.
		for i, svc := range sc.Services {
			b.UpdateService(svc, nil)
			add(b.Build().States[0], i == 0, time.Minute)
		}
	}
	c, st := benchBuilder(300, 10)
	add(st, false, 0)
	for i := range 30 {
		st := changeOneEndpoint(c, i*37%300, i%10)
		switch i % 4 {
		case 1:
			add(st, true, time.Second)
			add(c.b.Build().States[0], false, time.Second)
		case 2:
			old := c.slices[i]
			upd := old.DeepCopy()
			upd.Endpoints = upd.Endpoints[:i%7+1]
			c.slices[i] = upd
			c.b.UpdateEndpointSlice(old, upd)
			add(c.b.Build().States[0], true, time.Minute)
			add(c.b.Build().States[0], false, time.Minute)
		case 3:
			add(st, true, time.Second)
			add(st, false, time.Hour)
		default:
			// Full syncs of changed States: the period ran out, and
			// after failed ones.
			add(st, false, time.Hour)
			add(changeOneEndpoint(c, (i+1)*53%300, i%10), true, time.Second)
			add(changeOneEndpoint(c, (i+2)*53%300, i%10), true, time.Second)
			add(changeOneEndpoint(c, (i+3)*53%300, i%10), false, time.Second)
		}
	}

	// Through nft text on a fake that keeps the rules, and encoded for
	// netlink with a table that reads back without them.
	// Endpoints gone and back in another order: the chains take other
	// slots than a full sync gives them in name order.
	for _, part := range [][2]int{{0, 100}, {50, 100}, {0, 50}} {
		for i := part[0]; i < part[1]; i++ {
			if part == [2]int{0, 100} {
				c.b.UpdateEndpointSlice(c.slices[i], nil)
			} else {
				c.b.UpdateEndpointSlice(nil, c.slices[i])
			}
		}
		add(c.b.Build().States[0], false, time.Second)
	}
	add(changeOneEndpoint(c, 7, 3), true, time.Second)
	add(c.b.Build().States[0], false, time.Second)

	run := func(text, reuse bool) (txs, skips []string) {
		fail := false
		clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		cfg := Config{Clock: clk, FullSyncPeriod: 30 * time.Minute, StaleChainDelay: time.Minute,
			OnSkip: func(reason string) { skips = append(skips, reason) }}
		var d *Dataplane
		var err error
		if text {
			cfg.NFT = recordingNFT{knftables.NewFake(knftables.IPv4Family, DefaultTable), &txs, &fail}
			d, err = New(cfg)
		} else {
			d, err = NewEncodeOnly(cfg, func(batch []byte) error {
				txs = append(txs, string(batch))
				if fail {
					return errors.New("refused")
				}
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range steps {
			clk.Step(s.after)
			fail = s.fail
			if !reuse {
				d.cache = nil
			}
			if err := d.Sync(context.Background(), s.state); err != nil && !s.fail {
				t.Fatalf("step %d: %v", i, err)
			}
			txs = append(txs, "stats "+strings.Join([]string{itoa(d.Stats().Operations), itoa(d.Stats().Services)}, " "))
			if p := d.prog; p != nil {
				txs = append(txs, "programmed "+strings.Join([]string{itoa(len(p.services)), itoa(len(p.winners)), itoa(len(p.others)),
					itoa(p.chains), itoa(p.rules), itoa(p.dnatElems)}, " "))
			}
		}
		return txs, skips
	}
	for _, text := range []bool{true, false} {
		wantTxs, wantSkips := run(text, false)
		if len(wantSkips) < 3 {
			t.Fatalf("skipped %q, want the bad port reported at each of its syncs", wantSkips)
		}
		gotTxs, gotSkips := run(text, true)
		if d := cmp.Diff(wantTxs, gotTxs); d != "" {
			t.Errorf("text %v: transactions (-rendering everything +reusing):\n%s", text, d)
		}
		if d := cmp.Diff(wantSkips, gotSkips); d != "" {
			t.Errorf("text %v: skipped (-rendering everything +reusing):\n%s", text, d)
		}
	}
}

// TestSortServices: sorting in two halves merged is sorting.
func TestSortServices(t *testing.T) {
	for _, n := range []int{0, 1, 5, 4*parallelMin - 1, 4 * parallelMin, 3001} {
		var all []namedPorts
		for i := range n {
			all = append(all, namedPorts{nn: types.NamespacedName{Namespace: "ns" + itoa(i*7919%13), Name: "svc" + itoa(i*104729%n)}})
		}
		want := slices.Clone(all)
		slices.SortFunc(want, func(a, b namedPorts) int { return servicemodel.CompareNames(a.nn, b.nn) })
		sortServices(all, 2)
		if d := cmp.Diff(want, all, cmp.AllowUnexported(namedPorts{})); d != "" {
			t.Errorf("%d services (-want +got):\n%s", n, d)
		}
	}
}
