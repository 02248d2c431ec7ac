package iptables

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultFullSyncPeriod is how often a Sync rewrites everything even when
// little changed, as kube-proxy does hourly.
const DefaultFullSyncPeriod = time.Hour

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
	// Logger receives sync summaries and skip reasons; the zero value is
	// klog.Background().
	Logger logr.Logger
	// Runner executes the restores; nil means an ExecRunner for Family.
	// Ignored when DryRun is set.
	Runner Runner
	// DryRun, when set, makes Sync write each restore input it would run
	// to DryRun instead, touching nothing and needing no privileges.
	DryRun io.Writer
	// FullSyncPeriod is the longest time between full syncs; 0 means
	// DefaultFullSyncPeriod, negative never forces one.
	FullSyncPeriod time.Duration
	// OnSkip, if set, is called with a short reason for every service
	// port, endpoint, address or setting left out as invalid.
	OnSkip func(reason string)
	// Clock is the time source for FullSyncPeriod; nil means the real
	// clock.
	Clock clock.PassiveClock
	// Registerer receives the dataplane's metrics (see the package
	// documentation); nil registers none. The IPv4 and IPv6 Dataplanes
	// may share one: their series differ by the ip_family label.
	Registerer prometheus.Registerer
}

// Dataplane programs States into iptables. Its methods are safe for
// concurrent use; syncs are serialized.
type Dataplane struct {
	cfg     Config
	names   chainNames
	mark    string
	ipv6    bool
	log     logr.Logger
	runner  Runner
	metrics *metrics

	mu sync.Mutex
	// prog is what the kernel holds; nil until a full sync succeeded and
	// after any failure.
	prog     *programmed
	lastGen  uint64
	lastFull time.Time
	stats    SyncStats
}

var _ dataplane.Dataplane = (*Dataplane)(nil)

// New checks cfg and returns a Dataplane. Unless cfg.DryRun or cfg.Runner
// is set it probes the iptables binaries.
func New(cfg Config) (*Dataplane, error) {
	if cfg.Family == "" {
		cfg.Family = v1.IPv4Protocol
	}
	if cfg.Family != v1.IPv4Protocol && cfg.Family != v1.IPv6Protocol {
		return nil, fmt.Errorf("iptables: unknown IP family %q", cfg.Family)
	}
	names, err := newChainNames(cfg.ChainPrefix)
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	if cfg.MasqueradeBit == 0 {
		cfg.MasqueradeBit = 14
	}
	if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
		return nil, fmt.Errorf("iptables: masquerade bit %d out of range [0, 31]", cfg.MasqueradeBit)
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	if cfg.FullSyncPeriod == 0 {
		cfg.FullSyncPeriod = DefaultFullSyncPeriod
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	m, err := newMetrics(cfg.Registerer, cfg.Family)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		metrics: m,
		cfg:     cfg,
		names:   names,
		mark:    fmt.Sprintf("%#08x", uint32(1)<<cfg.MasqueradeBit),
		ipv6:    cfg.Family == v1.IPv6Protocol,
		log:     cfg.Logger.WithValues("dataplane", "iptables", "ipFamily", cfg.Family),
	}
	switch {
	case cfg.DryRun != nil:
	case cfg.Runner != nil:
		d.runner = cfg.Runner
	default:
		r, err := NewExecRunner(ExecConfig{Family: cfg.Family})
		if err != nil {
			return nil, err
		}
		d.log.V(2).Info("Found iptables", "version", r.Version())
		d.runner = r
	}
	return d, nil
}

// Name implements dataplane.Dataplane.
func (d *Dataplane) Name() string { return "iptables" }

// SyncStats describes the last Sync.
type SyncStats struct {
	// Full reports a full sync.
	Full bool
	// Bytes is the size of the restore input; 0 when nothing changed and
	// no restore ran.
	Bytes int
	// Services is the number of services whose rules were rendered.
	Services int
	// Edits is the number of single-rule edits of the shared chains.
	Edits int
	// written counts the rules the restore appended or inserted, per
	// table, for the metrics.
	written [numTables]int
}

// LastSync returns the statistics of the last successful Sync.
func (d *Dataplane) LastSync() SyncStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// Invalidate makes the next Sync a full one, for callers that learnt that
// someone else changed the rules (a flushed table, a restarted firewall).
func (d *Dataplane) Invalidate() {
	d.mu.Lock()
	d.prog = nil
	d.mu.Unlock()
}

func (d *Dataplane) skip(reason string, kv ...any) {
	d.log.V(1).Info("Skipping invalid input", append([]any{"reason", reason}, kv...)...)
	if d.cfg.OnSkip != nil {
		d.cfg.OnSkip(reason)
	}
}

// checkState refuses States the dataplane cannot program at all.
func (d *Dataplane) checkState(s *dataplane.State) error {
	if s == nil {
		return fmt.Errorf("iptables: nil State")
	}
	fam := s.Family
	if fam == "" {
		fam = v1.IPv4Protocol
	}
	if fam != d.cfg.Family {
		return fmt.Errorf("iptables: State is %s, dataplane programs %s", fam, d.cfg.Family)
	}
	return nil
}

// Render returns the complete restore input that a full sync of s would
// run, deterministic and sorted, preceded by comment lines naming the jumps
// that hook the chains into the built-in ones. It needs no privileges and
// changes nothing.
func (d *Dataplane) Render(s *dataplane.State) ([]byte, error) {
	if err := d.checkState(s); err != nil {
		return nil, err
	}
	prog := d.build(s)
	var b writer
	d.writeJumpComments(&b)
	d.writeFull(&b, prog, nil)
	return b.Bytes(), nil
}

func (d *Dataplane) writeJumpComments(b *writer) {
	for _, j := range d.jumps() {
		b.line("# -t ", j.Table, " -I ", j.Chain, " ", joinRule(j.Rule))
	}
}

// Cleanup implements dataplane.Dataplane: it unhooks and deletes every chain
// of the prefix, whatever state they are in.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prog = nil
	if d.runner == nil {
		return nil
	}
	err := d.cleanup(ctx)
	if err == nil {
		for t := range numTables {
			d.metrics.rules[t].Set(0)
		}
	}
	return err
}
