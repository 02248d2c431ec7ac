package kerneltest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// CorpusConfig configures ReplayCorpora.
type CorpusConfig struct {
	// Root is the repository root, under which fuzzobj.ModelCorpora finds
	// the model's fuzz corpora ("../.." from a dataplane's package).
	Root string
	// Harness creates the dataplane under test, once per family, each in
	// the node namespace of a lab of its own; New, Proxy and PodNetwork
	// are used.
	Harness Config
	// Check, if set, runs after every State is synced: the dataplane's
	// own checks of what it wrote (that the same State again does
	// nothing, that every service port the model kept is programmed).
	Check func(t *testing.T, c CorpusSync)
}

// CorpusSync is one State ReplayCorpora synced.
type CorpusSync struct {
	// What names the replay: "all entries", an entry's name, or "all
	// entries and a valid service".
	What string
	// Partial says the State was synced over another's: every replay but
	// the first, which the dataplane programs from nothing.
	Partial   bool
	State     *dataplane.State
	Builder   *CorpusBuilder
	Dataplane dataplane.Dataplane
	// Node is the namespace the dataplane runs in.
	Node *netns.NS
}

// CorpusReport is what ReplayCorpora replayed.
type CorpusReport struct {
	// Entries is the number of corpus entries; Syncs the States synced.
	Entries, Syncs int
	// Skipped is what the Builder skipped as invalid (objects or parts of
	// them) with every entry fed at once, SkippedAlone the sum over the
	// entries fed each alone.
	Skipped, SkippedAlone int
	// Served is the connections that reached the valid Service's
	// endpoint after the corpus, one family's Trace each.
	Served  int
	Elapsed time.Duration
}

func (r CorpusReport) String() string {
	return fmt.Sprintf("%d entries, %d States synced, 0 rejected; skipped %d (all at once), %d (each alone); valid service served in %d families; %s",
		r.Entries, r.Syncs, r.Skipped, r.SkippedAlone, r.Served, r.Elapsed.Round(time.Millisecond))
}

// The valid Service the replay adds last, with one endpoint per family,
// and where the outside client that checks it is served sends from.
var (
	validService    = [2]string{"proxykit-corpus", "valid"}
	validClusterIPs = [2]netip.Addr{netip.MustParseAddr("172.30.255.1"), netip.MustParseAddr("fd00:172:30::ff:1")}
	validEndpoints  = [2]netip.AddrPort{netip.MustParseAddrPort("10.181.0.1:8080"), netip.MustParseAddrPort("[fd00:10::181:1]:8080")}
	outsideClients  = [2]netip.Addr{netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("fd00:203::7")}
)

// ReplayCorpora replays the model's checked-in fuzz corpora, the bad
// objects its fuzzers found interesting, through a CorpusBuilder into the
// dataplane of Config.Harness in a real kernel, both families: every entry
// at once, then each entry alone, the previous one's objects deleted. Every Sync must succeed (a write the kernel rejects
// fails it, and a panic fails the test binary), Config.Check must pass,
// and where the dataplane is a dataplane.Reconciler, a Reconcile must find
// what was just synced. After the corpus, the whole corpus again with one
// valid Service added: a real TCP connection from outside to each of its
// cluster IPs must reach its endpoint. Last, the dataplane's Cleanup must
// succeed and leave the node's nftables ruleset empty: its own tables, or
// those iptables-nft made for its rules, gone (read where nft is on PATH).
func ReplayCorpora(t *testing.T, cfg CorpusConfig) CorpusReport {
	t.Helper()
	start := time.Now()
	entries, err := fuzzobj.ModelCorpora(cfg.Root)
	if err != nil {
		t.Fatal(err)
	}
	r := &replayer{t: t, cfg: cfg, harness: map[v1.IPFamily]*Harness{
		v1.IPv4Protocol: New(t, cfg.Harness),
		v1.IPv6Protocol: New(t, cfg.Harness),
	}}
	report := CorpusReport{Entries: len(entries)}

	// One Builder throughout, as a dataplane is fed by one source: each
	// State's Generation tells it what changed since the one it synced
	// last, so that the entries alone are partial syncs.
	f := NewCorpusBuilder()
	for _, e := range entries {
		f.Feed(e.Objects)
	}
	report.Syncs += r.replay("all entries", f, false)
	report.Skipped = f.Skipped()
	if report.Skipped == 0 {
		t.Error("the Builder skipped nothing: the corpora's bad objects did not reach the model")
	}
	for _, e := range entries {
		before := f.Skipped()
		f.Clear()
		f.Feed(e.Objects)
		report.Syncs += r.replay(e.Name, f, true)
		report.SkippedAlone += f.Skipped() - before
	}

	f.Clear()
	for _, e := range entries {
		f.Feed(e.Objects)
	}
	addValidService(f)
	report.Syncs += r.replay("all entries and a valid service", f, true)
	for i, fam := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if err := r.harness[fam].checkServed(t, validClusterIPs[i], validEndpoints[i], outsideClients[i]); err != nil {
			t.Errorf("after the corpus, %s: %v", fam, err)
			continue
		}
		report.Served++
	}
	for fam, h := range r.harness {
		if err := h.Cleanup(context.Background()); err != nil {
			t.Errorf("%s: Cleanup after the corpus: %v", fam, err)
			continue
		}
		if left := h.nftablesLeft(t); left != "" {
			t.Errorf("%s: after Cleanup, the node's nftables ruleset still holds:\n%s", fam, left)
		}
	}
	report.Elapsed = time.Since(start)
	return report
}

// replayer syncs a CorpusBuilder's States, each family's through its own
// Harness.
type replayer struct {
	t       *testing.T
	cfg     CorpusConfig
	harness map[v1.IPFamily]*Harness
}

// replay syncs the States of f and checks each; it returns how many it
// synced.
func (r *replayer) replay(what string, f *CorpusBuilder, partial bool) int {
	t := r.t
	t.Helper()
	ctx := t.Context()
	states := f.Build()
	for _, s := range states {
		h := r.harness[s.Family]
		if err := h.program(ctx, s); err != nil {
			t.Fatalf("%s, %s: the kernel rejected what the model built from the corpus: %v", what, s.Family, err)
		}
		if r.cfg.Check != nil {
			r.cfg.Check(t, CorpusSync{What: what, Partial: partial, State: s, Builder: f, Dataplane: h.dp, Node: h.lab.node.ns})
		}
		drift, err := h.Reconcile(ctx)
		if errors.Is(err, dataplanetest.ErrNotImplemented) {
			continue
		}
		if err != nil || !drift.Empty() {
			t.Errorf("%s, %s: Reconcile of what was just synced: %v, drift %s", what, s.Family, err, drift)
		}
	}
	return len(states)
}

// addValidService adds the valid Service to f: a dual-stack ClusterIP
// Service with one TCP port, and a ready endpoint per family on this node.
func addValidService(f *CorpusBuilder) {
	ns, name := validService[0], validService[1]
	f.Service(dataplanetest.MakeService(ns, name, func(s *v1.Service) {
		dualStack(s, validClusterIPs[0].String(), validClusterIPs[1].String())
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, 0, int32(validEndpoints[0].Port()))}
	}))
	for i, ep := range validEndpoints {
		f.Slice(dataplanetest.MakeSlice(ns, name, i, func(es *discovery.EndpointSlice) {
			if ep.Addr().Is6() {
				es.AddressType = discovery.AddressTypeIPv6
			}
			es.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, int32(ep.Port()))}
			es.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(ep.Addr().String(), fuzzobj.SliceNode)}
		}))
	}
}

// checkServed serves ep in the lab and requires TCP connections from
// client, outside, to clusterIP port 80 to reach ep and nothing else.
func (h *Harness) checkServed(t *testing.T, clusterIP netip.Addr, ep netip.AddrPort, client netip.Addr) error {
	if err := h.lab.serveEndpoint(ep); err != nil {
		return err
	}
	p := dataplane.Packet{From: dataplane.FromOutside, Src: client, Dst: netip.AddrPortFrom(clusterIP, 80), Protocol: v1.ProtocolTCP}
	v, err := h.Trace(t.Context(), p)
	if err != nil {
		return err
	}
	if v.Action != dataplane.DNAT || !slices.Equal(v.Endpoints, []netip.AddrPort{ep}) {
		return fmt.Errorf("connections from %s to %s: %s to %v, want DNAT to %s", client, p.Dst, v.Action, v.Endpoints, ep)
	}
	return nil
}
