package iptables

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/nfacct"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/fanout"
	v1 "k8s.io/api/core/v1"
)

// Config configures a Dataplane. The zero value programs IPv4 through the
// iptables binaries on PATH, with chains prefixed "PK-" and masquerade mark
// bit 14.
type Config struct {
	// Family is the IP family programmed; "" means IPv4. States of the
	// other family are refused.
	Family v1.IPFamily
	// ChainPrefix prefixes every chain the dataplane creates; "" means
	// DefaultChainPrefix. It must be at most 11 characters of A-Z, 0-9,
	// '-' and '_', and not "KUBE-".
	ChainPrefix string
	// MasqueradeBit is the fwmark bit that flags packets for SNAT; 0
	// means 14, kube-proxy's default (so bit 0 cannot be chosen). At most
	// 31.
	MasqueradeBit int
	// Logger receives sync summaries, repairs and skip reasons; the zero
	// value logs nothing.
	Logger logr.Logger
	// Runner is the dataplane's door to iptables; nil means an ExecRunner
	// for Family. A FakeRunner is the way to run without a kernel: it
	// simulates one, records every restore input and can print them.
	Runner xtables.Runner
	// Sysctl reads nf_conntrack_tcp_be_liberal and sets route_localnet
	// for localhost node ports. nil means the real /proc/sys (of the
	// calling thread's network namespace), except with a FakeRunner,
	// where it means an empty sysctl.Fake: a dataplane on a FakeRunner
	// touches nothing.
	Sysctl sysctl.Interface
	// Accounting holds the nfacct counters that kube-proxy's
	// packet-accounting rules count into: LocalhostNodePortsCounter, in
	// the rule that sends node-port packets to 127.0.0.0/8 on to their
	// service (IPv4 with localhost node ports), and InvalidDroppedCounter,
	// in the rule that drops forwarded packets conntrack finds INVALID.
	// Every full sync makes them if they are missing and writes the
	// nfacct match only if that worked: on a kernel without
	// nfnetlink_acct the rules are written without it, the dataplane
	// logs that once, and proxykit_iptables_nfacct_available is 0. The
	// Registerer gets their totals, read at scrape time, as
	// proxykit_iptables_localhost_nodeports_accepted_packets_total and
	// proxykit_iptables_ct_state_invalid_dropped_packets_total (no sample
	// while a counter does not exist). nil means the kernel's, dialled at
	// the first full sync on the syncing thread (so in its network
	// namespace), except with a FakeRunner, where it means an empty
	// nfacct.Fake.
	Accounting nfacct.Interface
	// OnSkip, if set, is called with a short reason for every service
	// port, endpoint, address or setting left out as invalid.
	OnSkip func(reason string)
	// Registerer receives the dataplane's metrics (see the package
	// documentation); nil registers none. The IPv4 and IPv6 Dataplanes
	// may share one: their series differ by the ip_family label.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metric names; "" means "proxykit".
	MetricsNamespace string
	// RenderWorkers is how many goroutines a full sync renders services
	// on when it has many to render (at least 256 per goroutine); 0 means
	// GOMAXPROCS, at most 4, and 1 renders everything on the syncing
	// goroutine. The rules are the same whatever the number.
	RenderWorkers int
}

// Dataplane programs States into iptables. Its methods are safe for
// concurrent use; syncs are serialized.
type Dataplane struct {
	cfg     Config
	names   chainNames
	mark    string
	ipv6    bool
	log     logr.Logger
	runner  xtables.Runner
	metrics *metrics
	// workers is Config.RenderWorkers resolved.
	workers int
	// skip reports an input left out as invalid.
	skip fanout.Skip

	sysctl sysctl.Interface
	// acct is the nfacct counters' client and state.
	acct accounting

	mu sync.Mutex
	// prog is what the kernel holds; nil until a full sync succeeded and
	// after any failure.
	prog *programmed
	// last is the State last programmed.
	last  *dataplane.State
	stats SyncStats
	// warnedSlow is set once the slow-backend warning was logged.
	warnedSlow bool
	// cache is the last full rendering, kept across failures: it says
	// nothing about the kernel, only about what States render to.
	cache *renderCache
	// gens gates the canary on the ruleset generation (nft backend).
	gens generations
}

var (
	_ dataplane.Dataplane     = (*Dataplane)(nil)
	_ dataplane.Reconciler    = (*Dataplane)(nil)
	_ dataplane.KernelWatcher = (*Dataplane)(nil)
	_ dataplane.SyncReporter  = (*Dataplane)(nil)
)

// New checks cfg and returns a Dataplane. Unless cfg.Runner
// is set it probes the iptables binaries.
func New(cfg Config) (*Dataplane, error) {
	family, err := backend.Family("iptables", cfg.Family)
	if err != nil {
		return nil, err
	}
	cfg.Family = family
	names, err := newChainNames(cfg.ChainPrefix)
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	if cfg.MasqueradeBit, err = backend.MasqueradeBit("iptables", cfg.MasqueradeBit); err != nil {
		return nil, err
	}
	workers, err := backend.RenderWorkers("iptables", cfg.RenderWorkers)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.MetricsNamespace, cfg.Family)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		metrics: m,
		cfg:     cfg,
		names:   names,
		workers: workers,
		mark:    fmt.Sprintf("%#08x", uint32(1)<<cfg.MasqueradeBit),
		ipv6:    cfg.Family == v1.IPv6Protocol,
		log:     cfg.Logger.WithValues("dataplane", "iptables", "ipFamily", cfg.Family),
	}
	d.skip = backend.Skipper{Log: d.log, OnSkip: cfg.OnSkip}.Skip
	d.runner, d.sysctl = cfg.Runner, cfg.Sysctl
	if d.runner == nil {
		r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: cfg.Family})
		if err != nil {
			return nil, err
		}
		d.log.V(2).Info("Found iptables", "version", r.Version())
		d.runner = r
	}
	d.gens = newGenerations(d.runner)
	_, fake := d.runner.(*xtables.FakeRunner)
	if d.sysctl == nil {
		if fake {
			d.sysctl = sysctl.NewFake(nil)
		} else {
			d.sysctl = sysctl.Proc{}
		}
	}
	d.acct.client, d.acct.log = cfg.Accounting, d.log
	if d.acct.client == nil && fake {
		d.acct.client = &nfacct.Fake{}
	}
	if err := registerCounters(cfg.Registerer, cfg.MetricsNamespace, &d.acct); err != nil {
		return nil, fmt.Errorf("iptables: register metrics: %w", err)
	}
	return d, nil
}

// Name implements dataplane.Dataplane.
func (d *Dataplane) Name() string { return "iptables" }

// SyncStats describes the last Sync.
type SyncStats struct {
	dataplane.SyncReport
	// Edits is the number of single-rule edits of the shared chains.
	Edits int
	// written counts the rules the restore appended or inserted, per
	// table, for the metrics.
	written [numTables]int
}

// Stats returns the statistics of the last successful Sync.
func (d *Dataplane) Stats() SyncStats { return backend.Locked(&d.mu, &d.stats) }

// LastSync implements dataplane.SyncReporter.
func (d *Dataplane) LastSync() dataplane.SyncReport { return d.Stats().SyncReport }

// checkState refuses States the dataplane cannot program at all.
func (d *Dataplane) checkState(s *dataplane.State) error {
	return backend.CheckState("iptables", d.cfg.Family, s)
}

// Render returns the complete restore input that the first full sync of s
// into empty tables would run, jumps from the built-in chains included,
// deterministic and sorted. It needs no privileges and changes nothing:
// it writes the nfacct matches (see Config.Accounting) unless a full sync
// found the counters unavailable.
func (d *Dataplane) Render(s *dataplane.State) ([]byte, error) {
	if err := d.checkState(s); err != nil {
		return nil, err
	}
	prog, _ := d.build(s, nil, d.acct.available())
	var b bytes.Buffer
	if _, err := d.fullInput(prog, nil, d.jumps()).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Cleanup implements dataplane.Dataplane: it unhooks and deletes every chain
// of the prefix, whatever state they are in, and with iptables-nft the
// tables and built-in chains left empty (see the package documentation):
// an empty, accepting built-in chain is removed whoever created it, which
// changes no packet's fate.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prog = nil
	err := d.cleanup(ctx)
	if err == nil {
		for t := range numTables {
			d.metrics.rules[t].Set(0)
		}
	}
	return err
}
