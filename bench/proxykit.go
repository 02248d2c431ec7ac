package main

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	pkipvs "github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/ipvstest"
	pknftables "github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// proxykitSystem is a proxykit dataplane fed by a dataplane.Builder, the
// way the proxykit package drives it.
type proxykitSystem struct {
	b  *dataplane.Builder
	dp dataplane.Dataplane
	be backend
	// full is whether the last sync was a full one, and bytes the size
	// of its input, as the dataplane reports them.
	full  bool
	bytes int
	// last is the State of the last sync.
	last *dataplane.State
}

// builderSettings are the settings every system runs with: local traffic
// detected by the cluster CIDR, node ports on every node address, no
// localhost node ports.
func builderSettings() dataplane.Settings {
	return dataplane.Settings{LocalDetector: dataplane.LocalDetector{
		Mode:  dataplane.LocalModeClusterCIDR,
		CIDRs: []netip.Prefix{netip.MustParsePrefix(clusterCIDR), netip.MustParsePrefix(clusterCIDRv6)},
	}}
}

// newProxykitSystem returns dp fed by a Builder of States of dp's family.
func newProxykitSystem(dp dataplane.Dataplane, family v1.IPFamily, be backend) *proxykitSystem {
	return &proxykitSystem{
		b: dataplane.NewBuilder(dataplane.BuilderConfig{
			Families: []v1.IPFamily{family}, NodeName: nodeName, Settings: builderSettings(),
		}),
		dp: dp,
		be: be,
	}
}

func (s *proxykitSystem) updateNode(n *v1.Node)              { s.b.UpdateNode(n) }
func (s *proxykitSystem) updateService(old, new *v1.Service) { s.b.UpdateService(old, new) }
func (s *proxykitSystem) updateSlice(old, new *discovery.EndpointSlice) {
	s.b.UpdateEndpointSlice(old, new)
}
func (s *proxykitSystem) backend() backend { return s.be }

func (s *proxykitSystem) sync() error {
	st := s.b.Build().States[0]
	if err := s.dp.Sync(context.Background(), st); err != nil {
		return fmt.Errorf("%s: %w", s.dp.Name(), err)
	}
	s.last = st
	if r, ok := s.dp.(dataplane.SyncReporter); ok {
		s.full, s.bytes = r.LastSync().Full, r.LastSync().Bytes
	}
	return nil
}

// newProxykitNFTables is proxykit's nftables dataplane: for the kernel,
// over netlink (Config.NFT nil) in the child's own network namespace,
// which the whole process entered at its start, so the socket New opens
// is there; compute-only, the same path up to the netlink messages, which
// an encodeBackend discards (NewEncodeOnly).
func newProxykitNFTables(be string, family v1.IPFamily) (system, error) {
	switch be {
	case discard:
		b := &encodeBackend{}
		d, err := pknftables.NewEncodeOnly(pknftables.Config{Family: family, Logger: logr.Discard()}, b.send)
		if err != nil {
			return nil, err
		}
		return newProxykitSystem(d, family, b), nil
	case nftables:
		d, err := pknftables.New(pknftables.Config{Family: family, Logger: logr.Discard()})
		if err != nil {
			return nil, err
		}
		s := newProxykitSystem(d, family, nil)
		s.be = &netlinkBackend{sys: s, dp: d}
		return s, nil
	default:
		return nil, fmt.Errorf("proxykit nftables cannot run on %s", be)
	}
}

// newProxykitNFTablesText is proxykit's nftables dataplane compute-only
// through its nft text path (Config.NFT, an nftBackend that discards the
// text), which the default path never runs: -nft-text compares the two.
func newProxykitNFTablesText(be string, family v1.IPFamily) (system, error) {
	if be != discard {
		return nil, fmt.Errorf("proxykit nftables' text path runs compute-only")
	}
	b := newNFTBackendFor(nil, family, pknftables.DefaultTable)
	d, err := pknftables.New(pknftables.Config{Family: family, NFT: b, Logger: logr.Discard()})
	if err != nil {
		return nil, err
	}
	return newProxykitSystem(d, family, b), nil
}

// encodeBackend takes the netlink batches of proxykit's nftables
// dataplane, encoded as they would be sent, and keeps only their size.
type encodeBackend struct {
	fail  bool
	bytes int
}

func (b *encodeBackend) send(batch []byte) error {
	if b.fail {
		b.fail = false
		return errInjected
	}
	b.bytes += len(batch)
	return nil
}

func (b *encodeBackend) failNext()  { b.fail = true }
func (b *encodeBackend) beginSync() { b.bytes = 0 }

// written is the size of the netlink batches of the last sync.
func (b *encodeBackend) written() int { return b.bytes }

// firstInput is never called: only kernel runs restore the first input.
func (b *encodeBackend) firstInput() []byte { return nil }

// netlinkBackend is the backend of proxykit's nftables dataplane over
// netlink: the kernel itself, no nft process. Its floor input is the
// first sync's State as the nft script the dataplane renders for it, the
// same ruleset in text, so that the floor row is a bare nft -f of it.
type netlinkBackend struct {
	sys *proxykitSystem
	dp  *pknftables.Dataplane
}

// failNext is never called: kernel runs inject no failures.
func (b *netlinkBackend) failNext() { panic("the benchmark injects no failures into the kernel") }

func (b *netlinkBackend) beginSync()   {}
func (b *netlinkBackend) written() int { return b.sys.bytes }

// firstInput renders the State of the last sync, which kernel runs call
// only after the first, outside the time measured.
func (b *netlinkBackend) firstInput() []byte {
	if b.sys.last == nil {
		return nil
	}
	text, err := b.dp.Render(b.sys.last)
	if err != nil {
		return nil
	}
	return text
}

func newProxykitIPTables(be string, family v1.IPFamily) (system, error) {
	r, err := newPKRunner(be, family)
	if err != nil {
		return nil, err
	}
	cfg := iptables.Config{Family: family, Runner: r, Logger: logr.Discard()}
	if be == discard {
		cfg.Sysctl = sysctl.NewFake(nil)
	}
	d, err := iptables.New(cfg)
	if err != nil {
		return nil, err
	}
	return newProxykitSystem(d, family, r), nil
}

// newProxykitIPVS is proxykit's IPVS dataplane on ipvstest's fakes of
// the IPVS table, the link and the ipsets, its iptables rules discarded.
func newProxykitIPVS(be string, family v1.IPFamily) (system, error) {
	if be != discard {
		return nil, fmt.Errorf("proxykit ipvs cannot run on %s", be)
	}
	k := ipvstest.NewKernel()
	// The node's addresses, which node ports are served on.
	k.Netlink.SetLinkAddrs("eth0", netip.MustParseAddr(nodeIP), netip.MustParseAddr(nodeIPv6))
	b := ipvsBackend{pkRunner: &pkRunner{}, kernel: k}
	d, err := pkipvs.New(pkipvs.Config{Family: family, Kernel: k, Runner: b.pkRunner, Logger: logr.Discard()})
	if err != nil {
		return nil, err
	}
	return newProxykitSystem(d, family, b), nil
}

// ipvsBackend is the backend of proxykit's IPVS dataplane: a pkRunner
// takes its iptables rules, the fakes count its netlink calls, and
// failures are injected into its IPVS table, which every sync calls where
// a partial one may write no rules.
type ipvsBackend struct {
	*pkRunner
	kernel *ipvstest.Kernel
}

func (b ipvsBackend) failNext() { b.kernel.IPVS.FailNext(errInjected) }

// beginSync implements backend: a sync restores iptables rules only when
// they changed.
func (b ipvsBackend) beginSync() { b.last = 0 }

func (b ipvsBackend) calls() int { return b.kernel.IPVS.Calls() + b.kernel.Netlink.Calls() }
