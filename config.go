package proxykit

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/health"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultMinSyncPeriod    = 1 * time.Second
	DefaultSyncPeriod       = 30 * time.Second
	DefaultRetryPeriod      = 1 * time.Second
	DefaultCanaryPeriod     = 1 * time.Second
	DefaultMetricsNamespace = "proxykit"
)

// Config configures a Proxy. Only Dataplanes is required; every other zero
// value is documented on its field.
type Config struct {
	// NodeName is the name of the node the proxy runs on: endpoints on it
	// are local, and the Node object of that name supplies zone, IPs and
	// eligibility for /healthz. "" makes no endpoint local and skips the
	// node eligibility check.
	NodeName string
	// ProxyName is this proxy's service.kubernetes.io/service-proxy-name:
	// services labelled with another name are left to that proxy. "" takes
	// only unlabelled services, as kube-proxy does.
	ProxyName string

	// Dataplanes are programmed from one set of trackers, in this order,
	// one after the other in each sync: one per IP family for dual-stack,
	// or several for one family side by side. At least one is required.
	Dataplanes []DataplaneConfig
	// Sources feed the trackers. The first sync waits until every source
	// has called Handler.Synced. None at all means the proxy is synced at
	// once and programs an empty State (useful with Proxy.Handler).
	Sources []source.Source
	// Settings are copied into every State (per-family CIDR lists are
	// filtered to the State's family). New refuses Settings that
	// Settings.Validate refuses, with an error wrapping ErrInvalidConfig
	// and the *dataplane.SettingsError.
	Settings dataplane.Settings

	// MinSyncPeriod is the least time between the end of one sync and the
	// start of the next: changes arriving meanwhile coalesce into one sync.
	// Zero means DefaultMinSyncPeriod (1s); a negative value means none.
	MinSyncPeriod time.Duration
	// SyncPeriod is the reconcile period: this often, even without
	// changes, every dataplane.Reconciler reads back what it programmed
	// and repairs what someone else changed, and every other dataplane is
	// made to program everything again. Zero means DefaultSyncPeriod
	// (30s). Upstream re-programs in full only hourly and uses syncPeriod
	// for retries; proxykit retries with backoff (RetryPeriod) instead.
	// Reading back costs a listing of the rules: large clusters may raise
	// it, the canary (CanaryPeriod) still notices a flush within seconds.
	SyncPeriod time.Duration
	// CanaryPeriod is how often each dataplane.KernelWatcher is asked
	// whether someone changed what it programmed (a firewall reload,
	// "iptables -F", a deleted rule, map element, virtual server or
	// address, a foreign rule in its chains); when one was, /healthz
	// fails naming it and the proxy reconciles at once (within
	// MinSyncPeriod), so that noticing and repair fit in a few seconds.
	// Zero means DefaultCanaryPeriod (1s); a negative value disables the
	// checks. A check costs little while nothing changes: the nftables
	// and iptables (nft backend) dataplanes and userspace's redirect
	// rules read the nftables ruleset generation, one netlink round trip,
	// and read their rules only when someone else moved it; IPVS reads
	// /proc/net/ip_vs, the link's addresses and its ipsets (milliseconds
	// at 10,000 services); iptables-legacy lists two canary chains, which
	// reads the whole table under the xtables lock. A check that read the
	// rules (about 230 ms for nftables at 10,000 services) is followed by
	// a wait of at least nine times its duration, so that a node where
	// another program changes rules every second spends at most a tenth
	// of a core on the canary, and notices drift that much later.
	CanaryPeriod time.Duration
	// RetryPeriod is the wait after a first failed sync; it doubles with
	// each further failure up to MaxRetryPeriod, and MinSyncPeriod still
	// applies. Zero means DefaultRetryPeriod (1s).
	RetryPeriod time.Duration
	// MaxRetryPeriod caps the retry backoff. Zero means SyncPeriod.
	MaxRetryPeriod time.Duration

	// HealthTimeout is how long a queued change may wait for a successful
	// sync before /healthz and /livez report the proxy unhealthy. Zero
	// means 2×SyncPeriod, as kube-proxy does.
	HealthTimeout time.Duration
	// HealthzBindAddress, if set, is the host:port Run serves /healthz and
	// /livez on (kube-proxy's default is 0.0.0.0:10256). "" serves
	// nothing; mount Proxy.HealthzHandler and Proxy.LivezHandler yourself.
	HealthzBindAddress string
	// MetricsBindAddress, if set, is the host:port Run serves /metrics on
	// (kube-proxy's default is 127.0.0.1:10249). It needs a Registerer
	// that is also a prometheus.Gatherer, such as *prometheus.Registry.
	MetricsBindAddress string
	// BindRetryPeriod, if positive, is how often Run tries again to listen
	// on HealthzBindAddress or MetricsBindAddress when it could not at
	// start (a port another process still holds, as while kube-proxy is
	// being replaced), logging each failure; it then serves as soon as it
	// can. kube-proxy retries every 5s unless --bind-address-hard-fail.
	// Zero makes such a failure an error that Run returns before it
	// starts anything.
	BindRetryPeriod time.Duration

	// DisableHealthCheckNodePorts stops the proxy from serving the
	// health-check node ports of externalTrafficPolicy: Local services.
	// The zero value serves them, as kube-proxy does.
	DisableHealthCheckNodePorts bool
	// HealthCheckAddresses are the addresses health-check node ports
	// listen on (each family's server uses the addresses of its family).
	// nil means kube-proxy's choice: the local addresses within
	// Settings.NodePortAddresses, or every address when that is empty.
	HealthCheckAddresses []netip.Addr

	// Registerer receives the proxy's metrics; nil means no metrics.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes every metric name; "" means
	// DefaultMetricsNamespace ("proxykit").
	MetricsNamespace string
	// Logger is where the proxy logs; the zero value (like logr.Discard())
	// logs nothing. At verbosity 0 it gets a start-up line, warnings of
	// likely misconfiguration and failures; more detail at V(2) and up.
	Logger logr.Logger
	// Clock drives every timer; nil means the real clock. Tests pass a
	// k8s.io/utils/clock/testing.FakeClock.
	Clock clock.Clock
	// Conntrack deletes connection-tracking entries made stale by a sync;
	// nil means no cleanup.
	Conntrack ConntrackCleaner
	// Recorder, if set, receives a Warning event for each health-check node
	// port that cannot be opened. A client-go record.EventRecorder fits.
	Recorder EventRecorder
}

// DataplaneConfig is one dataplane and the IP family whose States it
// programs.
type DataplaneConfig struct {
	// Family is v1.IPv4Protocol or v1.IPv6Protocol; "" means IPv4.
	Family    v1.IPFamily
	Dataplane dataplane.Dataplane
}

// EventRecorder records Kubernetes events; client-go's
// record.EventRecorder implements it.
type EventRecorder = health.EventRecorder

// ErrInvalidConfig is wrapped by every configuration error New returns.
var ErrInvalidConfig = errors.New("invalid proxykit config")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// withDefaults validates c and returns it with every zero value replaced
// by its documented default.
func (c Config) withDefaults() (Config, error) {
	if len(c.Dataplanes) == 0 {
		return c, invalidf("no dataplanes")
	}
	c.Dataplanes = append([]DataplaneConfig(nil), c.Dataplanes...)
	for i := range c.Dataplanes {
		d := &c.Dataplanes[i]
		if d.Dataplane == nil {
			return c, invalidf("Dataplanes[%d] is nil", i)
		}
		switch d.Family {
		case "":
			d.Family = v1.IPv4Protocol
		case v1.IPv4Protocol, v1.IPv6Protocol:
		default:
			return c, invalidf("Dataplanes[%d] (%s): unknown IP family %q", i, d.Dataplane.Name(), d.Family)
		}
	}
	for i, s := range c.Sources {
		if s == nil {
			return c, invalidf("Sources[%d] is nil", i)
		}
	}
	if err := c.Settings.Validate(); err != nil {
		// The *dataplane.SettingsError stays reachable with errors.As.
		return c, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, p := range []struct {
		name string
		d    time.Duration
	}{{"SyncPeriod", c.SyncPeriod}, {"RetryPeriod", c.RetryPeriod}, {"MaxRetryPeriod", c.MaxRetryPeriod}, {"HealthTimeout", c.HealthTimeout}} {
		if p.d < 0 {
			return c, invalidf("%s %v is negative", p.name, p.d)
		}
	}
	if c.SyncPeriod == 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	switch {
	case c.MinSyncPeriod == 0:
		c.MinSyncPeriod = DefaultMinSyncPeriod
	case c.MinSyncPeriod < 0:
		c.MinSyncPeriod = 0
	}
	if c.MinSyncPeriod > c.SyncPeriod {
		return c, invalidf("MinSyncPeriod %v exceeds SyncPeriod %v", c.MinSyncPeriod, c.SyncPeriod)
	}
	if c.CanaryPeriod == 0 {
		c.CanaryPeriod = DefaultCanaryPeriod
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.MaxRetryPeriod == 0 {
		c.MaxRetryPeriod = c.SyncPeriod
	}
	if c.RetryPeriod > c.MaxRetryPeriod {
		c.RetryPeriod = c.MaxRetryPeriod
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 2 * c.SyncPeriod
	}
	if c.MetricsBindAddress != "" {
		if _, ok := c.Registerer.(prometheus.Gatherer); !ok {
			return c, invalidf("MetricsBindAddress needs a Registerer that is a prometheus.Gatherer")
		}
	}
	if c.MetricsNamespace == "" {
		c.MetricsNamespace = DefaultMetricsNamespace
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c, nil
}

// families returns the distinct families of c.Dataplanes in order of first
// appearance: the Builder's families.
func (c *Config) families() []v1.IPFamily {
	var out []v1.IPFamily
	for _, d := range c.Dataplanes {
		if !slices.Contains(out, d.Family) {
			out = append(out, d.Family)
		}
	}
	return out
}
