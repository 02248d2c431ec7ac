package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	v1 "k8s.io/api/core/v1"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// The proxy modes kube-proxy knows, and the one this agent has built.
var (
	proxyModes = []string{"iptables", "nftables", "ipvs", "userspace"}
	builtModes = []string{"iptables", "nftables"}
)

// options is the parsed command line.
type options struct {
	kubeconfig, manifests string
	proxyMode             string
	hostnameOverride      string
	clusterCIDRs          []netip.Prefix
	nodePortAddresses     []netip.Prefix
	nodePortPrimary       bool
	masqueradeAll         bool
	minSyncPeriod         time.Duration
	syncPeriod            time.Duration
	healthzBindAddress    string
	metricsBindAddress    string
	dryRun, once, cleanup bool
	verbosity             int
	// set records which flags the command line gave, so that defaults
	// that would bind a port apply only where binding is expected.
	set map[string]bool

	// explain is set for the explain subcommand.
	explain *explainArgs
}

type explainArgs struct {
	src      netip.Addr
	dst      netip.AddrPort
	protocol v1.Protocol
	// from is "" when the origin is to be inferred from src.
	from string
}

// usageError is a command line that cannot be run.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

const usageHead = `Usage:
  nodeagent [flags]                          run the proxy
  nodeagent [flags] explain SRC DST:PORT/PROTO [--from pod|node|outside]
                                             tell where a packet goes and why

With neither --kubeconfig nor --manifests the agent uses the in-cluster
config inside a pod, and its bundled demo manifests elsewhere. With no flags
at all it prints the rules it would program (for the demo, or inside a pod
for the cluster) and exits.

Flags:
`

func newFlagSet(o *options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(out, usageHead)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to a kubeconfig file of the cluster to watch")
	fs.StringVar(&o.manifests, "manifests", "", "watch a file or folder of Service, EndpointSlice and Node YAML instead of a cluster")
	fs.StringVar(&o.proxyMode, "proxy-mode", "iptables", "which proxy mode to use: "+strings.Join(proxyModes, ", ")+" (built: "+strings.Join(builtModes, ", ")+")")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "the name of this node, if not the hostname (demo-node for the demo manifests)")
	fs.Func("cluster-cidr", "comma-separated CIDRs of the pods in the cluster (at most one per IP family); traffic from outside them to a cluster IP is masqueraded", func(s string) (err error) {
		o.clusterCIDRs, err = parseCIDRs(s, false)
		return err
	})
	fs.Func("nodeport-addresses", "comma-separated CIDRs (or the keywords all, localhost, primary) of the node addresses NodePorts are served on; default all", func(s string) (err error) {
		var rest []string
		o.nodePortPrimary = false
		for _, f := range strings.Split(s, ",") {
			if strings.TrimSpace(f) == "primary" {
				o.nodePortPrimary = true
			} else {
				rest = append(rest, f)
			}
		}
		o.nodePortAddresses, err = parseCIDRs(strings.Join(rest, ","), true)
		return err
	})
	fs.BoolVar(&o.masqueradeAll, "masquerade-all", false, "SNAT all traffic sent through service cluster IPs")
	fs.DurationVar(&o.minSyncPeriod, "min-sync-period", time.Second, "the least time between two syncs of the rules")
	fs.DurationVar(&o.syncPeriod, "sync-period", 30*time.Second, "the longest time between two syncs; each reads the rules back and repairs what someone else changed")
	fs.StringVar(&o.healthzBindAddress, "healthz-bind-address", "0.0.0.0:10256", "host:port to serve /healthz and /livez on; empty to disable")
	fs.StringVar(&o.metricsBindAddress, "metrics-bind-address", "127.0.0.1:10249", "host:port to serve /metrics on; empty to disable")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be programmed (the iptables-restore input, or the nft script) and touch nothing; needs no privileges")
	fs.BoolVar(&o.once, "once", false, "sync once and exit: 0 on success, 1 with the reason on failure")
	fs.BoolVar(&o.cleanup, "cleanup", false, "remove everything the agent programmed and exit")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity")
	return fs
}

// parse reads args. Flags may come before or after the explain
// subcommand's operands; --from belongs to explain alone.
func parse(args []string, out io.Writer) (*options, error) {
	o := &options{set: map[string]bool{}}
	fs := newFlagSet(o, out)
	var from string
	fs.StringVar(&from, "from", "", "explain: where the packet comes from: pod (a pod on this node), node (a process on this node) or outside; default inferred from SRC")
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		operands = append(operands, args[0])
		args = args[1:]
	}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })

	if !slices.Contains(proxyModes, o.proxyMode) {
		return nil, usagef("unknown --proxy-mode %q: use one of %s", o.proxyMode, strings.Join(proxyModes, ", "))
	}
	if o.kubeconfig != "" && o.manifests != "" {
		return nil, usagef("--kubeconfig and --manifests are exclusive")
	}
	if o.syncPeriod <= 0 {
		return nil, usagef("--sync-period must be positive")
	}
	if o.minSyncPeriod < 0 || o.minSyncPeriod > o.syncPeriod {
		return nil, usagef("--min-sync-period must be between 0 and --sync-period")
	}
	if o.once && o.cleanup {
		return nil, usagef("--once and --cleanup are exclusive")
	}
	switch {
	case len(operands) == 0:
		if o.set["from"] {
			return nil, usagef("--from applies to explain only")
		}
	case operands[0] == "explain":
		e, err := parseExplain(operands[1:], from)
		if err != nil {
			return nil, err
		}
		o.explain = e
	default:
		return nil, usagef("unknown command %q", operands[0])
	}
	return o, nil
}

func parseExplain(operands []string, from string) (*explainArgs, error) {
	if len(operands) != 2 {
		return nil, usagef("explain needs SRC and DST:PORT/PROTO, e.g. explain 10.244.0.5 10.96.0.10:53/UDP")
	}
	e := &explainArgs{from: from}
	var err error
	if e.src, err = netip.ParseAddr(operands[0]); err != nil {
		return nil, usagef("explain: source %q is not an IP address", operands[0])
	}
	e.src = e.src.Unmap()
	dst, proto, hasProto := strings.Cut(operands[1], "/")
	e.protocol = v1.ProtocolTCP
	if hasProto {
		e.protocol = v1.Protocol(strings.ToUpper(proto))
	}
	if e.protocol != v1.ProtocolTCP && e.protocol != v1.ProtocolUDP && e.protocol != v1.ProtocolSCTP {
		return nil, usagef("explain: protocol %q is not TCP, UDP or SCTP", proto)
	}
	if e.dst, err = netip.ParseAddrPort(dst); err != nil || e.dst.Port() == 0 {
		return nil, usagef("explain: destination %q is not IP:PORT (bracket IPv6 addresses: [fd00::1]:80)", dst)
	}
	e.dst = netip.AddrPortFrom(e.dst.Addr().Unmap(), e.dst.Port())
	if e.src.Is4() != e.dst.Addr().Is4() {
		return nil, usagef("explain: source and destination are of different IP families")
	}
	switch from {
	case "", "pod", "node", "outside":
	default:
		return nil, usagef("explain: --from %q is not pod, node or outside", from)
	}
	return e, nil
}

// parseCIDRs parses a comma-separated list. With keywords, "all" and
// "localhost" expand as kube-proxy expands them.
func parseCIDRs(s string, keywords bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	perFamily := map[bool]int{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case keywords && f == "all":
			out = append(out, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"))
			continue
		case keywords && f == "localhost":
			out = append(out, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR", f)
		}
		p = p.Masked()
		perFamily[p.Addr().Is4()]++
		if !keywords && perFamily[p.Addr().Is4()] > 1 {
			return nil, fmt.Errorf("at most one CIDR per IP family")
		}
		out = append(out, p)
	}
	return out, nil
}

// settings turns the options into the proxy's dataplane settings.
func (o *options) settings() dataplane.Settings {
	s := dataplane.Settings{
		MasqueradeAll:     o.masqueradeAll,
		NodePortAddresses: o.nodePortAddresses,
		// kube-proxy's nftables mode serves node ports on the node's
		// primary IPs unless told otherwise.
		NodePortPrimary: o.nodePortPrimary || o.proxyMode == "nftables" && !o.set["nodeport-addresses"],
		// kube-proxy's --iptables-localhost-nodeports defaults to true.
		LocalhostNodePorts: true,
	}
	if len(o.clusterCIDRs) > 0 {
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: o.clusterCIDRs}
	}
	return s
}
