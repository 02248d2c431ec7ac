package ipvs

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/sysctl"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/internal/logtext"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// Defaults of Config.
const (
	// DefaultLink is the dummy link service addresses are bound to: never
	// kube-proxy's kube-ipvs0, so that both can run on one node.
	DefaultLink = "proxykit-ipvs0"
	// DefaultPrefix prefixes the chains and (with "6" for IPv6) the
	// ipsets: "PKV-SERVICES", "PKV-CLUSTER-IP", "PKV6-CLUSTER-IP".
	DefaultPrefix = "PKV"
	// DefaultScheduler is IPVS's round robin, kube-proxy's default.
	DefaultScheduler = "rr"
	// DefaultDrainTimeout bounds graceful termination.
	DefaultDrainTimeout = 15 * time.Minute
)

// Schedulers returns the IPVS schedulers Config.Scheduler accepts.
func Schedulers() []string {
	return []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "mh", "sed", "nq"}
}

// SchedulerFlags returns the scheduler flags Config.SchedulerFlags
// accepts, as ipvsadm and kube-proxy name them: flag-1 (sh: fallback, mh:
// fallback), flag-2 (sh and mh: hash the source port too) and flag-3.
func SchedulerFlags() []string {
	return []string{"flag-1", "flag-2", "flag-3"}
}

// Config configures a Dataplane. The zero value programs IPv4 IPVS in the
// calling thread's network namespace with the rr scheduler, binds service
// addresses to the dummy link "proxykit-ipvs0", keeps its ipsets and
// chains under the prefix "PKV" through the iptables binaries on PATH,
// marks packets to masquerade with bit 14, sets the sysctls IPVS mode
// needs (without strict ARP) and leaves IPVS's timeouts alone.
type Config struct {
	// Family is the IP family programmed; "" means IPv4. States of the
	// other family are refused.
	Family v1.IPFamily
	// Kernel is where the virtual servers, the link and the ipsets are
	// programmed; nil means the calling thread's network namespace, opened
	// by New (OpenKernel, never closed), which fails with an error
	// wrapping ErrNoIPVS on a kernel without IPVS. An ipvstest.Kernel
	// runs without a kernel.
	Kernel Kernel
	// Runner writes the iptables rules; nil means an xtables.ExecRunner
	// of the family. An xtables.FakeRunner keeps them in memory.
	Runner xtables.Runner
	// Sysctl sets the kernel parameters of the package documentation. nil
	// means the real /proc/sys (of the calling thread's network
	// namespace), except with an ipvstest.Kernel, where it means an empty
	// sysctl.Fake: a dataplane on the fakes touches nothing.
	Sysctl sysctl.Interface
	// Link is the dummy link's name; "" means DefaultLink. It must be a
	// name dataplane.IsInterfaceName accepts: at most 15 bytes of ASCII
	// letters, digits, '-', '_' and '.'.
	Link string
	// Prefix prefixes chains and ipsets; "" means DefaultPrefix. At most 8
	// characters of A-Z, 0-9 and '-'.
	Prefix string
	// Scheduler is the scheduler of every virtual server (one of
	// Schedulers);
	// "" means DefaultScheduler.
	Scheduler string
	// SchedulerFlags are set on every virtual server (each one of the
	// package's SchedulerFlags).
	// The mh scheduler gets flag-2 whatever this says, as in kube-proxy.
	SchedulerFlags []string
	// StrictARP stops the node answering ARP for the addresses on the
	// dummy link (arp_ignore=1, arp_announce=2 on all interfaces), which
	// load balancers announcing VIPs need.
	StrictARP bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout set IPVS's connection
	// timeouts (seconds are kept); 0 leaves a timeout as it is.
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
	// MasqueradeBit is the fwmark bit that flags packets for SNAT; 0
	// means 14, kube-proxy's default. At most 31.
	MasqueradeBit int
	// DrainTimeout bounds how long a removed TCP real server keeps its
	// open connections at weight 0 before it is deleted anyway; 0 means
	// DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Clock measures DrainTimeout; nil means the real clock.
	Clock clock.PassiveClock
	// Logger receives sync summaries and skip reasons; the zero value
	// logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called with a short reason for every service
	// port or address left out as invalid.
	OnSkip func(reason string)
}

var validPrefix = regexp.MustCompile(`^[A-Z0-9-]{1,8}$`)

// schedFlag maps the SchedulerFlags to IPVS's service flags.
var schedFlag = map[string]uint32{"flag-1": 0x8, "flag-2": 0x10, "flag-3": 0x20}

// resolve fills in cfg's defaults and checks it.
func (cfg Config) resolve() (Config, error) {
	var err error
	if cfg.Family, err = backend.Family("ipvs", cfg.Family); err != nil {
		return cfg, err
	}
	if cfg.Link == "" {
		cfg.Link = DefaultLink
	}
	if msgs := dataplane.IsInterfaceName(cfg.Link); len(msgs) > 0 {
		return cfg, fmt.Errorf("ipvs: link name %q: %s", logtext.String(cfg.Link), strings.Join(msgs, "; "))
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !validPrefix.MatchString(cfg.Prefix) {
		return cfg, fmt.Errorf("ipvs: prefix %q: want at most 8 characters of A-Z, 0-9 and '-'", cfg.Prefix)
	}
	if cfg.Scheduler == "" {
		cfg.Scheduler = DefaultScheduler
	}
	if !slices.Contains(Schedulers(), cfg.Scheduler) {
		return cfg, fmt.Errorf("ipvs: unknown scheduler %q: want one of %s", cfg.Scheduler, strings.Join(Schedulers(), ", "))
	}
	for _, f := range cfg.SchedulerFlags {
		if _, ok := schedFlag[f]; !ok {
			return cfg, fmt.Errorf("ipvs: unknown scheduler flag %q: want %s", f, strings.Join(SchedulerFlags(), ", "))
		}
	}
	for name, d := range map[string]time.Duration{"TCPTimeout": cfg.TCPTimeout, "TCPFinTimeout": cfg.TCPFinTimeout, "UDPTimeout": cfg.UDPTimeout, "DrainTimeout": cfg.DrainTimeout} {
		if d < 0 {
			return cfg, fmt.Errorf("ipvs: %s %s is negative", name, d)
		}
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.MasqueradeBit, err = backend.MasqueradeBit("ipvs", cfg.MasqueradeBit); err != nil {
		return cfg, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return cfg, nil
}

// flags returns the service flags of every virtual server.
func (cfg *Config) flags() uint32 {
	var f uint32
	for _, name := range cfg.SchedulerFlags {
		f |= schedFlag[name]
	}
	if cfg.Scheduler == "mh" {
		f |= schedFlag["flag-2"]
	}
	return f
}

// names are the dataplane's chains and sets. internal holds the one
// per-service part of the rules (see addInternal); the other chains only
// match sets.
type names struct {
	services, markMasq, postrouting, internal, filter, forward, sourceRanges string
	set                                                                      map[setID]string
}

func newNames(prefix string, ipv6 bool) names {
	setPrefix := prefix + "-"
	if ipv6 {
		setPrefix = prefix + "6-"
	}
	n := names{
		services:     prefix + "-SERVICES",
		markMasq:     prefix + "-MARK-MASQ",
		postrouting:  prefix + "-POSTROUTING",
		internal:     prefix + "-INTERNAL",
		filter:       prefix + "-FILTER",
		forward:      prefix + "-FORWARD",
		sourceRanges: prefix + "-SOURCE-RANGES",
		set:          map[setID]string{},
	}
	for id, spec := range setSpecs {
		n.set[setID(id)] = setPrefix + spec.name
	}
	return n
}
