package dataplanetest

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
)

// Harness is a dataplane under test: the Dataplane plus a way to ask where
// what it programmed sends a packet.
type Harness interface {
	dataplane.Dataplane
	// Trace reports the verdict the programmed dataplane gives p. With
	// nothing programmed (before the first Sync, after Cleanup) every
	// packet is NotAService. An error means the harness could not tell,
	// not that the packet was dropped.
	Trace(ctx context.Context, p dataplane.Packet) (dataplane.Verdict, error)
}

// Moded is implemented by a Harness whose dataplane follows the semantics of
// a kube-proxy mode other than iptables: the suite then expects
// State.LookupMode of that mode, and PacketCase.ByMode where a case says
// so.
type Moded interface {
	Mode() dataplane.Mode
}

// modeOf returns the mode h follows.
func modeOf(h Harness) dataplane.Mode {
	if m, ok := h.(Moded); ok {
		return m.Mode()
	}
	return dataplane.ModeIPTables
}

// Partial is implemented by a Harness that sees only part of a Verdict: one
// that sends real packets cannot tell which service rule matched them, for
// instance. The suite compares its Trace answers with Observable(expected)
// rather than with the expected verdict itself.
type Partial interface {
	// Observable returns v with the fields the harness cannot see set to
	// what its Trace reports for them.
	Observable(v dataplane.Verdict) dataplane.Verdict
}

// Tags that scenarios and packet cases carry, for running subsets.
// Scenarios adds TagKernelSafe, TagIPv6, TagLocalhost and TagHealthCheck
// itself, from each case's packet and verdict.
const (
	// TagKernelSafe marks cases a real kernel in test network namespaces
	// can reproduce by sending the packet: the source is a pod, an outside
	// client or the node itself on one of its own addresses (never an
	// address it would have to spoof, such as a LoadBalancer VIP), and the
	// verdict is observable as a connection outcome (no Accept).
	TagKernelSafe = "kernel-safe"
	// TagIPv6 marks IPv6 scenarios.
	TagIPv6 = "ipv6"
	// TagLocalhost marks cases addressed to or sent from loopback.
	TagLocalhost = "localhost"
	// TagHealthCheck marks health-check node port cases (Accept).
	TagHealthCheck = "health-check"
	// TagSpoofedSource marks cases whose source is an address the sender
	// would have to spoof or hold as a local VIP (a node reaching a
	// LoadBalancer VIP it owns, with the VIP as source). They are never
	// TagKernelSafe.
	TagSpoofedSource = "spoofed-source"
)

// Scenario is one small cluster as this node sees it and where packets go
// in it.
type Scenario struct {
	Name string
	// Tags apply to every packet case of the scenario.
	Tags []string
	// Family is the IP family of the State the scenario builds; "" means
	// IPv4.
	Family   v1.IPFamily
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
	// Node is this node's object; its name is the Builder's NodeName. When
	// nil, the node is NodeName with no known zone, addresses or pod CIDRs.
	Node *v1.Node
	// ServiceCIDRs are the cluster's ServiceCIDR objects.
	ServiceCIDRs []*networking.ServiceCIDR
	Settings     dataplane.Settings
	Packets      []PacketCase
}

// PacketCase is one packet and the verdict Kubernetes semantics give it.
type PacketCase struct {
	Name   string
	Tags   []string
	Packet dataplane.Packet
	// Want is compared on every field but Reason.
	Want dataplane.Verdict
	// ByMode is the verdict under the modes where it differs from Want.
	ByMode map[dataplane.Mode]dataplane.Verdict
}

// WantIn returns the case's verdict under mode m.
func (c PacketCase) WantIn(m dataplane.Mode) dataplane.Verdict {
	if v, ok := c.ByMode[m]; ok {
		return v
	}
	return c.Want
}

// Build feeds the scenario's objects to a new Builder and builds its State.
// An object the Builder skips fails t: scenarios hold only valid objects.
func (s Scenario) Build(t testing.TB) (*dataplane.Builder, *dataplane.State) {
	t.Helper()
	family := s.Family
	if family == "" {
		family = v1.IPv4Protocol
	}
	nodeName := NodeName
	if s.Node != nil {
		nodeName = s.Node.Name
	}
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{family},
		NodeName: nodeName,
		Settings: s.Settings,
		OnSkip: func(kind, reason string) {
			t.Errorf("scenario %q: Builder skipped a %s: %s", s.Name, kind, reason)
		},
	})
	if s.Node != nil {
		b.UpdateNode(s.Node)
	}
	for _, svc := range s.Services {
		b.UpdateService(nil, svc)
	}
	for _, slice := range s.Slices {
		b.UpdateEndpointSlice(nil, slice)
	}
	for _, c := range s.ServiceCIDRs {
		b.UpdateServiceCIDR(nil, c)
	}
	return b, b.Build().States[0]
}

// HasTag returns a Filter predicate keeping the cases that carry tag
// themselves or through their scenario.
func HasTag(tag string) func(Scenario, PacketCase) bool {
	return func(s Scenario, c PacketCase) bool {
		return slices.Contains(s.Tags, tag) || slices.Contains(c.Tags, tag)
	}
}

// Filter returns the scenarios with only the packet cases keep accepts,
// leaving out scenarios with none left. The input is not modified.
func Filter(scenarios []Scenario, keep func(Scenario, PacketCase) bool) []Scenario {
	var out []Scenario
	for _, s := range scenarios {
		var cases []PacketCase
		for _, c := range s.Packets {
			if keep(s, c) {
				cases = append(cases, c)
			}
		}
		if len(cases) > 0 {
			s.Packets = cases
			out = append(out, s)
		}
	}
	return out
}

// Run runs every scenario of Scenarios against harnesses newHarness
// returns; see RunScenarios.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	RunScenarios(t, Scenarios(), newHarness)
}

// RunScenarios runs each scenario as a subtest with a fresh harness from
// newHarness: Sync the scenario's State, require every packet's Trace to
// equal its WantIn and State.LookupMode of the harness's mode (see
// Moded), check the reconcile contract when the harness is a Drifter (see
// there), remove one endpoint and Sync again (Trace must follow the new
// State's LookupMode), then Cleanup (nothing is a service any more; a
// second Cleanup succeeds too).
func RunScenarios(t *testing.T, scenarios []Scenario, newHarness func(t *testing.T) Harness) {
	t.Helper()
	for _, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			runScenario(t, s, newHarness(t))
		})
	}
}

func runScenario(t *testing.T, s Scenario, h Harness) {
	ctx := t.Context()
	mode := modeOf(h)
	// First a State of another Builder, with nothing in it, whose
	// Generation the scenario's State then follows: a dataplane must not
	// take it for that State's predecessor (State.ChangedFrom).
	_, other := Scenario{Name: s.Name, Family: s.Family, Node: s.Node, Settings: s.Settings}.Build(t)
	if err := h.Sync(ctx, other); err != nil {
		t.Fatalf("%s: Sync of another Builder's State: %v", h.Name(), err)
	}
	b, _ := s.Build(t)
	st := b.Build().States[0]
	if err := h.Sync(ctx, st); err != nil {
		t.Fatalf("%s: Sync: %v", h.Name(), err)
	}
	for _, c := range s.Packets {
		t.Run(c.Name, func(t *testing.T) {
			want := c.WantIn(mode)
			if d := DiffVerdict(want, st.LookupMode(mode, c.Packet)); d != "" {
				t.Errorf("the table disagrees with State.LookupMode(%s) for %s (-want +lookup):\n%s", mode, describe(c.Packet), d)
			}
			checkTrace(t, h, c.Packet, want)
		})
	}
	checkDrift(t, h, s, st)

	if old, updated, ok := withoutOneEndpoint(s.Slices); ok {
		b.UpdateEndpointSlice(old, updated)
		st = b.Build().States[0]
		if err := h.Sync(ctx, st); err != nil {
			t.Fatalf("%s: Sync after removing an endpoint from %s: %v", h.Name(), old.Name, err)
		}
		for _, c := range s.Packets {
			t.Run("after endpoint removal/"+c.Name, func(t *testing.T) {
				checkTrace(t, h, c.Packet, st.LookupMode(mode, c.Packet))
			})
		}
	}

	if err := h.Cleanup(ctx); err != nil {
		t.Fatalf("%s: Cleanup: %v", h.Name(), err)
	}
	for _, c := range s.Packets {
		t.Run("after cleanup/"+c.Name, func(t *testing.T) {
			checkTrace(t, h, c.Packet, dataplane.Verdict{Action: dataplane.NotAService})
		})
	}
	if err := h.Cleanup(ctx); err != nil {
		t.Errorf("%s: second Cleanup: %v", h.Name(), err)
	}
}

func checkTrace(t *testing.T, h Harness, p dataplane.Packet, want dataplane.Verdict) {
	t.Helper()
	got, err := h.Trace(t.Context(), p)
	if err != nil {
		t.Fatalf("%s: Trace %s: %v", h.Name(), describe(p), err)
	}
	if ph, ok := h.(Partial); ok {
		want = ph.Observable(want)
	}
	if d := DiffVerdict(want, got); d != "" {
		t.Errorf("%s: Trace %s (-want +got):\n%s", h.Name(), describe(p), d)
	}
}

// DiffVerdict returns a human-readable difference between two verdicts, ""
// when they agree on everything but Reason (nil and empty endpoint lists
// are equal).
func DiffVerdict(want, got dataplane.Verdict) string {
	return cmp.Diff(want, got, cmpopts.IgnoreFields(dataplane.Verdict{}, "Reason"), cmpopts.EquateEmpty(),
		cmpopts.EquateComparable(netip.AddrPort{}))
}

func describe(p dataplane.Packet) string {
	from := p.From.String()
	if p.Interface != "" {
		from += " via " + p.Interface
	}
	return fmt.Sprintf("%s -> %s/%s (from %s)", p.Src, p.Dst, p.Protocol, from)
}

// withoutOneEndpoint returns the first slice with endpoints and a copy of it
// lacking its first endpoint.
func withoutOneEndpoint(sl []*discovery.EndpointSlice) (old, updated *discovery.EndpointSlice, ok bool) {
	for _, s := range sl {
		if len(s.Endpoints) == 0 {
			continue
		}
		updated = s.DeepCopy()
		updated.Endpoints = updated.Endpoints[1:]
		return s, updated, true
	}
	return nil, nil, false
}
