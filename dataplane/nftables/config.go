package nftables

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"github.com/proxykit/proxykit/internal/fanout"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/knftables"
)

// DefaultTable is the name of the table the dataplane owns in its family
// ("ip proxykit" or "ip6 proxykit"): never kube-proxy's "kube-proxy", so
// both can run on one node.
const DefaultTable = "proxykit"

// Config configures a Dataplane. The zero value programs IPv4 over netlink
// into the table "ip proxykit", with masquerade mark
// bit 14, a full sync at least hourly and transactions of at most 100,000
// operations.
type Config struct {
	// Family is the IP family programmed; "" means IPv4. States of the
	// other family are refused.
	Family v1.IPFamily
	// Table is the name of the dataplane's table; "" means DefaultTable.
	// It must not be "kube-proxy", and at most 64 characters of a-z, A-Z,
	// 0-9, '-' and '_'.
	Table string
	// NFT, when set, is the dataplane's door to nftables instead of
	// netlink: knftables.New(Family, Table) runs every transaction through
	// the nft binary, and a knftables.NewFake(Family, Table) is the way to
	// run without a kernel; it must be made for the same family and table.
	// nil means netlink, in the network namespace of the thread that
	// calls New: no nft process per sync and no nft binary needed, with
	// the bytecode nft itself writes for each rule.
	NFT knftables.Interface
	// MasqueradeBit is the fwmark bit that flags packets for SNAT; 0
	// means 14, kube-proxy's default (so bit 0 cannot be chosen). At most
	// 31.
	MasqueradeBit int
	// FullSyncPeriod is how long incremental syncs may follow one another
	// before a Sync reads the table back and converges it; 0 means one
	// hour, as kube-proxy, and a negative value never forces one.
	FullSyncPeriod time.Duration
	// StaleChainDelay is how long a chain nothing refers to any more is
	// kept (flushed) before a later Sync deletes it, in a transaction of
	// its own: kernels before 6.2 release a map element's reference to a
	// chain only after the transaction that deleted the element. 0 means
	// one second, as kube-proxy.
	StaleChainDelay time.Duration
	// MaxOperations bounds the operations of one transaction: a larger
	// full sync (a cold start of a big cluster) is split into several
	// transactions, ordered so that each only refers to objects the
	// earlier ones created. 0 means no bound over netlink, where a
	// million operations are one batch the kernel commits whole, and
	// 100,000 through Config.NFT (nft parses its input into memory); a
	// negative value never splits. Incremental syncs are never split.
	MaxOperations int
	// Clock measures FullSyncPeriod and StaleChainDelay; nil means the
	// real clock.
	Clock clock.PassiveClock
	// Logger receives sync summaries and skip reasons; the zero value
	// logs nothing.
	Logger logr.Logger
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

// Dataplane programs States into one nftables table. Its methods are safe
// for concurrent use; syncs are serialized.
type Dataplane struct {
	cfg    Config
	kernel kernel
	// text formats plans as nft input (Render, SyncReport.Bytes): Config.NFT,
	// or a knftables.Fake of the table when the kernel is reached over
	// netlink.
	text    knftables.Interface
	ipv6    bool
	ipX     string // "ip" or "ip6"
	addrT   string // "ipv4_addr" or "ipv6_addr"
	mark    string
	log     logr.Logger
	clock   clock.PassiveClock
	metrics *metrics
	// workers is Config.RenderWorkers resolved.
	workers int
	// skip reports an input left out as invalid.
	skip fanout.Skip

	mu sync.Mutex
	// prog is what the table holds; nil until a full sync succeeded and
	// after any failure.
	prog *programmed
	// st is the fixed part of the table as programmed with prog.
	st *static
	// cache holds the renderings of the services of the State last
	// synced; its services are prog's while prog is set.
	cache *renderCache
	// last is the State last programmed.
	last     *dataplane.State
	lastFull time.Time
	// recreated is set once a full sync re-created the base chains, so
	// that a table left by another version converges.
	recreated bool
	// stale holds flushed chains nothing refers to, and when they became
	// so; a later Sync deletes them.
	stale map[string]time.Time
	// suspect are the endpoint maps a rejected transaction wrote to: the
	// next full sync rewrites them whole instead of trusting the chains'
	// signatures for their elements, in case what nft refused was an
	// element nobody expected.
	suspect [mapCount + sharedMapCount]bool
	stats   SyncStats
	// seenGen is the ruleset generation at which the table was last known
	// to be as programmed, when seen is set (KernelChanged).
	seen    bool
	seenGen uint32
}

// forget makes the next sync full, after a failure left the table in a
// state the Dataplane does not know.
func (d *Dataplane) forget() {
	d.prog, d.stale = nil, map[string]time.Time{}
}

var (
	_ dataplane.Dataplane     = (*Dataplane)(nil)
	_ dataplane.SyncReporter  = (*Dataplane)(nil)
	_ dataplane.Reconciler    = (*Dataplane)(nil)
	_ dataplane.KernelWatcher = (*Dataplane)(nil)
)

// New checks cfg and returns a Dataplane. Unless cfg.NFT is set it opens
// a netlink socket to nftables; the error then says what is missing.
func New(cfg Config) (*Dataplane, error) {
	d, err := newDataplane(cfg)
	if err != nil || d.kernel != nil {
		return d, err
	}
	conn, err := nftnl.Open(d.family(), d.cfg.Table, nftnl.Options{Logger: d.log})
	if err != nil {
		return nil, &UnsupportedError{Err: err}
	}
	d.kernel = netlinkKernel{conn}
	return d, nil
}

// family is the Dataplane's family as knftables names it.
func (d *Dataplane) family() knftables.Family {
	if d.ipv6 {
		return knftables.IPv6Family
	}
	return knftables.IPv4Family
}

// newDataplane checks cfg and returns a Dataplane whose kernel is
// Config.NFT's, or nil for the caller to set when cfg.NFT is nil.
func newDataplane(cfg Config) (*Dataplane, error) {
	family, err := backend.Family("nftables", cfg.Family)
	if err != nil {
		return nil, err
	}
	cfg.Family = family
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if err := checkTableName(cfg.Table); err != nil {
		return nil, err
	}
	if cfg.MasqueradeBit, err = backend.MasqueradeBit("nftables", cfg.MasqueradeBit); err != nil {
		return nil, err
	}
	if cfg.FullSyncPeriod == 0 {
		cfg.FullSyncPeriod = time.Hour
	}
	if cfg.StaleChainDelay == 0 {
		cfg.StaleChainDelay = time.Second
	}
	if cfg.MaxOperations == 0 && cfg.NFT != nil {
		cfg.MaxOperations = 100_000
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	workers, err := backend.RenderWorkers("nftables", cfg.RenderWorkers)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer, cfg.MetricsNamespace, cfg.Family)
	if err != nil {
		return nil, err
	}
	d := &Dataplane{
		cfg:     cfg,
		text:    cfg.NFT,
		ipv6:    cfg.Family == v1.IPv6Protocol,
		ipX:     "ip",
		addrT:   "ipv4_addr",
		mark:    fmt.Sprintf("0x%x", uint32(1)<<cfg.MasqueradeBit),
		log:     cfg.Logger.WithValues("dataplane", "nftables", "ipFamily", cfg.Family),
		clock:   cfg.Clock,
		metrics: m,
		workers: workers,
		stale:   map[string]time.Time{},
	}
	d.skip = backend.Skipper{Log: d.log, Skipped: m.skipped, OnSkip: cfg.OnSkip}.Skip
	if d.ipv6 {
		d.ipX, d.addrT = "ip6", "ipv6_addr"
	}
	if d.text != nil {
		d.kernel = textKernel{d.text}
		return d, nil
	}
	d.text = knftables.NewFake(d.family(), cfg.Table)
	return d, nil
}

func checkTableName(name string) error {
	if name == "kube-proxy" {
		return fmt.Errorf("nftables: table %q belongs to kube-proxy", name)
	}
	ok := len(name) <= 64 && strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
	}) < 0
	if !ok {
		return fmt.Errorf("nftables: table name %q: want at most 64 characters of a-z, A-Z, 0-9, '-' and '_'", name)
	}
	return nil
}

// UnsupportedError is returned by New when this host cannot run the
// dataplane: no nftables in the kernel, or no right to it (CAP_NET_ADMIN).
type UnsupportedError struct {
	Err error
}

func (e *UnsupportedError) Error() string {
	return "nftables: this host cannot run the nftables dataplane (it needs a kernel with nf_tables and CAP_NET_ADMIN): " + e.Err.Error()
}

func (e *UnsupportedError) Unwrap() error { return e.Err }

// Name implements dataplane.Dataplane.
func (d *Dataplane) Name() string { return "nftables" }

// SyncStats describes the last successful Sync.
//
// SyncReport.Bytes is the size of the nft input exactly for syncs of up
// to 1,000 operations; a larger one (a full sync of a big table) reports
// the size of 1,000 of its operations, spread evenly over it, scaled to
// all of them, because measuring exactly means formatting the whole input
// a second time: a third of a cold start's CPU.
type SyncStats struct {
	dataplane.SyncReport
	// Operations is the number of operations of its transactions.
	Operations int
	// Transactions is how many transactions they were split into.
	Transactions int
}

// Stats returns the statistics of the last successful Sync.
func (d *Dataplane) Stats() SyncStats { return backend.Locked(&d.mu, &d.stats) }

// LastSync implements dataplane.SyncReporter.
func (d *Dataplane) LastSync() dataplane.SyncReport { return d.Stats().SyncReport }

// checkState refuses States the dataplane cannot program at all.
func (d *Dataplane) checkState(s *dataplane.State) error {
	return backend.CheckState("nftables", d.cfg.Family, s)
}

// Cleanup implements dataplane.Dataplane: it deletes the dataplane's table
// (only its own), and succeeds when there is none.
func (d *Dataplane) Cleanup(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.prog, d.stale = nil, map[string]time.Time{}
	if err := d.kernel.Run(ctx, []op{{Verb: verbAdd, Obj: &knftables.Table{}}, {Verb: verbDelete, Obj: &knftables.Table{}}}); err != nil {
		return fmt.Errorf("nftables: delete table %s %s: %w", d.ipX, d.cfg.Table, err)
	}
	d.metrics.elements.Set(0)
	d.metrics.chains.Set(0)
	d.metrics.rules.Set(0)
	return nil
}
