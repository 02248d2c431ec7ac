package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/examples/nodeagent/internal/kpconfig"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
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
	builtModes = []string{"iptables", "nftables", "ipvs", "userspace"}
)

// options is the parsed command line: kube-proxy's configuration (from
// --config or the flags, as kube-proxy decides) and the agent's own flags.
type options struct {
	// cfg is the effective KubeProxyConfiguration, defaulted, completed
	// and validated.
	cfg *v1alpha1.KubeProxyConfiguration

	configFile, writeConfigTo string
	master                    string
	hostnameOverride          string
	initOnly, cleanup         bool
	version                   bool
	manifests                 string
	demo                      bool
	dryRun, once              bool
	kubeProxyMetrics          bool

	// What kube-proxy's flags bind outside its configuration.
	iptablesSyncPeriod, iptablesMinSyncPeriod time.Duration
	ipvsSyncPeriod, ipvsMinSyncPeriod         time.Duration
	clusterCIDR                               string
	healthzPort, metricsPort                  int32
	logSplit                                  [2]bool

	// Derived from cfg.
	proxyMode         string
	verbosity         int
	clusterCIDRs      []netip.Prefix
	nodePortAddresses []netip.Prefix
	nodePortPrimary   bool
	masqueradeAll     bool
	minSyncPeriod     time.Duration
	syncPeriod        time.Duration

	// warnings are settings accepted but without effect here, logged once
	// the logger exists.
	warnings []string
	// set records which flags the command line gave, so that defaults
	// that would bind a port apply only where binding is expected.
	set map[string]bool

	// explain is set for the explain subcommand.
	explain *explainArgs
	// troubleshoot is set for diagnose, verify and list; tflags are their
	// flags (and explain's --kernel).
	troubleshoot *troubleshootArgs
	tflags       troubleshootFlags
	verifyPeriod time.Duration
	// agent is the running agent's metrics address the subcommands read
	// their model from (--agent); "" builds it from the source.
	agent string
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
  nodeagent [flags] explain SRC DST:PORT/PROTO [--from pod|node|outside] [--kernel]
                                             tell where a packet goes and why
  nodeagent [flags] diagnose NAMESPACE/SERVICE[:PORT] [--client IP] [--kernel] [-o json]
                                             tell why a Service may not answer
  nodeagent [flags] verify [-o json]         compare the kernel's rules with the model
  nodeagent [flags] list [--namespace NS] [--name NAME] [--type TYPE] [-o json]
                                             one line per frontend, with its backends

The flags are kube-proxy's, by name and meaning (see README.md for the few
that differ), plus the agent's own. With neither --kubeconfig, --master nor
--manifests the agent uses the in-cluster config inside a pod; elsewhere it
prints the rules of its bundled demo manifests and programs nothing (--demo
programs them). With no flags at all it prints the rules it would program
(for the demo, or inside a pod for the cluster) and exits.
`

// flagGroups are the sections of --help, in order.
type flagGroups struct {
	all    *pflag.FlagSet
	groups []*pflag.FlagSet
	names  []string
}

func (g *flagGroups) group(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	g.groups = append(g.groups, fs)
	g.names = append(g.names, name)
	return fs
}

// newFlagSet binds kube-proxy's flags to o.cfg, whose values are the
// flags' defaults, and the agent's to o.
func newFlagSet(o *options, from *string, out io.Writer) *pflag.FlagSet {
	c := o.cfg
	g := &flagGroups{all: pflag.NewFlagSet("nodeagent", pflag.ContinueOnError)}

	fs := g.group("Configuration")
	fs.StringVar(&o.configFile, "config", "", "the KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) file; kube-proxy's flags marked so are then ignored")
	fs.StringVar(&o.writeConfigTo, "write-config-to", "", "write the effective configuration to this file and exit")
	fs.Func("feature-gates", "comma-separated Name=true|false of kube-proxy's feature gates: "+strings.Join(kpconfig.GateNames(), ", ")+" (ignored with --config)", func(s string) error {
		return kpconfig.ParseGates(s, c.FeatureGates)
	})
	fs.BoolVar(&o.cleanup, "cleanup", false, "remove everything the agent programmed, in every proxy mode, and exit")
	fs.BoolVar(&o.initOnly, "init-only", false, "set the conntrack sysctls and OOM score (what needs full privileges) and exit")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")

	fs = g.group("Cluster")
	fs.StringVar(&c.ClientConnection.Kubeconfig, "kubeconfig", c.ClientConnection.Kubeconfig, "path to a kubeconfig file of the cluster to watch (ignored with --config)")
	fs.StringVar(&o.master, "master", "", "the API server's address (overrides the kubeconfig's)")
	fs.StringVar(&c.ClientConnection.ContentType, "kube-api-content-type", c.ClientConnection.ContentType, "content type of requests sent to the API server (ignored with --config)")
	fs.Int32Var(&c.ClientConnection.Burst, "kube-api-burst", c.ClientConnection.Burst, "burst to use while talking with the API server (ignored with --config)")
	fs.Float32Var(&c.ClientConnection.QPS, "kube-api-qps", c.ClientConnection.QPS, "QPS to use while talking with the API server (ignored with --config)")
	fs.DurationVar(&c.ConfigSyncPeriod.Duration, "config-sync-period", c.ConfigSyncPeriod.Duration, "how often the informers re-deliver what they hold; must be greater than 0 (ignored with --config)")
	fs.StringVar(&o.hostnameOverride, "hostname-override", "", "the name of this node, if not the hostname (demo-node for the demo manifests); wins over the file's")

	fs = g.group("Proxy")
	fs.StringVar((*string)(&c.Mode), "proxy-mode", "", "which proxy mode to use: "+strings.Join(proxyModes, ", ")+" (built: "+strings.Join(builtModes, ", ")+"; default iptables; ignored with --config); at start, what the agent's other modes left is removed")
	fs.BoolVar(&c.IPTables.MasqueradeAll, "masquerade-all", false, "SNAT all traffic sent through service cluster IPs (ignored with --config)")
	fs.Int32Var(c.IPTables.MasqueradeBit, "iptables-masquerade-bit", *c.IPTables.MasqueradeBit, "the fwmark bit that flags packets for SNAT, 1 to 31 (ignored with --config)")
	fs.BoolVar(c.IPTables.LocalhostNodePorts, "iptables-localhost-nodeports", *c.IPTables.LocalhostNodePorts, "serve IPv4 NodePorts on localhost too (ignored with --config)")
	fs.DurationVar(&o.iptablesSyncPeriod, "iptables-sync-period", c.IPTables.SyncPeriod.Duration, "the longest time between two syncs; each reads the rules back and repairs what someone else changed (ignored with --config)")
	fs.DurationVar(&o.iptablesMinSyncPeriod, "iptables-min-sync-period", c.IPTables.MinSyncPeriod.Duration, "the least time between two syncs; 0 syncs every change at once (ignored with --config)")
	fs.DurationVar(&o.ipvsSyncPeriod, "ipvs-sync-period", c.IPVS.SyncPeriod.Duration, "--iptables-sync-period of mode ipvs (ignored with --config)")
	fs.DurationVar(&o.ipvsMinSyncPeriod, "ipvs-min-sync-period", c.IPVS.MinSyncPeriod.Duration, "--iptables-min-sync-period of mode ipvs (ignored with --config)")
	fs.StringVar(&c.IPVS.Scheduler, "ipvs-scheduler", "", "the IPVS scheduler of mode ipvs (ignored with --config)")
	fs.StringSliceVar(&c.IPVS.ExcludeCIDRs, "ipvs-exclude-cidrs", nil, "CIDRs mode ipvs leaves alone when cleaning up (ignored with --config)")
	fs.BoolVar(&c.IPVS.StrictARP, "ipvs-strict-arp", false, "mode ipvs: set arp_ignore to 1 and arp_announce to 2 (ignored with --config)")
	fs.DurationVar(&c.IPVS.TCPTimeout.Duration, "ipvs-tcp-timeout", 0, "mode ipvs: idle timeout of TCP connections, 0 to leave as is (ignored with --config)")
	fs.DurationVar(&c.IPVS.TCPFinTimeout.Duration, "ipvs-tcpfin-timeout", 0, "mode ipvs: timeout of TCP connections after a FIN, 0 to leave as is (ignored with --config)")
	fs.DurationVar(&c.IPVS.UDPTimeout.Duration, "ipvs-udp-timeout", 0, "mode ipvs: timeout of UDP packets, 0 to leave as is (ignored with --config)")
	fs.StringVar((*string)(&c.DetectLocalMode), "detect-local-mode", "", "how traffic from local pods is told apart: ClusterCIDR (default), NodeCIDR, BridgeInterface, InterfaceNamePrefix (ignored with --config)")
	fs.StringVar(&o.clusterCIDR, "cluster-cidr", "", "comma-separated CIDRs of the pods in the cluster (at most one per IP family); with ClusterCIDR detection, traffic from outside them to a cluster IP is masqueraded (ignored with --config)")
	fs.StringVar(&c.DetectLocal.BridgeInterface, "pod-bridge-interface", "", "the bridge local pods' traffic enters through, for --detect-local-mode BridgeInterface (ignored with --config)")
	fs.StringVar(&c.DetectLocal.InterfaceNamePrefix, "pod-interface-name-prefix", "", "the prefix of the interfaces local pods' traffic enters through, for --detect-local-mode InterfaceNamePrefix (ignored with --config)")
	fs.StringSliceVar(&c.NodePortAddresses, "nodeport-addresses", nil, "CIDRs (or the keywords all, localhost, primary) of the node addresses NodePorts are served on; default all (primary in mode nftables) (ignored with --config)")

	fs = g.group("Node")
	fs.StringVar(&c.BindAddress, "bind-address", c.BindAddress, "kube-proxy's override of the node's primary IP; the agent reads the node's IPs from its Node, and only picks the servers' default addresses' family from it (ignored with --config)")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "host:port to serve /healthz and /livez on; empty to disable (ignored with --config)")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "host:port to serve /metrics, /healthz, /proxyMode and /configz on; empty to disable (ignored with --config)")
	fs.Int32Var(&o.healthzPort, "healthz-port", kpconfig.HealthzPort, "the port of --healthz-bind-address; 0 disables")
	_ = fs.MarkDeprecated("healthz-port", "use --healthz-bind-address instead")
	fs.Int32Var(&o.metricsPort, "metrics-port", kpconfig.MetricsPort, "the port of --metrics-bind-address; 0 disables")
	_ = fs.MarkDeprecated("metrics-port", "use --metrics-bind-address instead")
	fs.BoolVar(&c.BindAddressHardFail, "bind-address-hard-fail", false, "exit when the healthz or metrics server cannot bind, instead of retrying every 5s (ignored with --config)")
	fs.BoolVar(&c.EnableProfiling, "profiling", false, "serve /debug/pprof on the metrics server (ignored with --config)")
	fs.StringVar(&c.ShowHiddenMetricsForVersion, "show-hidden-metrics-for-version", "", "accepted and ignored: the agent hides no metrics (ignored with --config)")
	fs.Int32Var(c.OOMScoreAdj, "oom-score-adj", *c.OOMScoreAdj, "the OOM score adjustment of the agent's process, -1000 to 1000 (ignored with --config)")
	fs.Int32Var(c.Conntrack.MaxPerCore, "conntrack-max-per-core", *c.Conntrack.MaxPerCore, "conntrack entries to allow per CPU core (0 leaves the limit as is and ignores --conntrack-min) (ignored with --config)")
	fs.Int32Var(c.Conntrack.Min, "conntrack-min", *c.Conntrack.Min, "the least conntrack entries to allow, whatever --conntrack-max-per-core gives (ignored with --config)")
	fs.DurationVar(&c.Conntrack.TCPEstablishedTimeout.Duration, "conntrack-tcp-timeout-established", c.Conntrack.TCPEstablishedTimeout.Duration, "idle timeout of established TCP connections (0 leaves it as is) (ignored with --config)")
	fs.DurationVar(&c.Conntrack.TCPCloseWaitTimeout.Duration, "conntrack-tcp-timeout-close-wait", c.Conntrack.TCPCloseWaitTimeout.Duration, "timeout of TCP connections in CLOSE_WAIT (0 leaves it as is) (ignored with --config)")
	fs.BoolVar(&c.Conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", false, "set nf_conntrack_tcp_be_liberal to 1 (ignored with --config)")
	fs.DurationVar(&c.Conntrack.UDPTimeout.Duration, "conntrack-udp-timeout", 0, "idle timeout of unreplied UDP flows (0 leaves it as is) (ignored with --config)")
	fs.DurationVar(&c.Conntrack.UDPStreamTimeout.Duration, "conntrack-udp-timeout-stream", 0, "idle timeout of assured UDP flows (0 leaves it as is) (ignored with --config)")

	fs = g.group("Logging")
	fs.VarP(logsapi.VerbosityLevelPflag(&c.Logging.Verbosity), "v", "v", "log verbosity of the agent and of client-go, as kube-proxy's")
	fs.Var(logsapi.VModuleConfigurationPflag(&c.Logging.VModule), "vmodule", "comma-separated pattern=N verbosities per file (text format only)")
	fs.StringVar(&c.Logging.Format, "logging-format", c.Logging.Format, "text or json")
	fs.DurationVar(&c.Logging.FlushFrequency.Duration.Duration, "log-flush-frequency", c.Logging.FlushFrequency.Duration.Duration, "accepted and ignored: the agent's logs are not buffered")
	fs.BoolVar(&o.logSplit[0], "log-text-split-stream", false, "refused: the agent writes every log line to stderr")
	fs.Var(&c.Logging.Options.Text.InfoBufferSize, "log-text-info-buffer-size", "accepted and ignored: the agent's logs are not buffered")
	fs.BoolVar(&o.logSplit[1], "log-json-split-stream", false, "refused: the agent writes every log line to stderr")
	fs.Var(&c.Logging.Options.JSON.InfoBufferSize, "log-json-info-buffer-size", "accepted and ignored: the agent's logs are not buffered")

	fs = g.group("Agent (not kube-proxy's)")
	fs.StringVar(&o.manifests, "manifests", "", "watch a file or folder of Service, EndpointSlice and Node YAML instead of a cluster")
	fs.BoolVar(&o.demo, "demo", false, "take the bundled demo manifests as the source and program them (with --dry-run, print them); without this flag or another source the agent only prints them")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be programmed (the iptables-restore input, or the nft script) and touch nothing; needs no privileges")
	fs.BoolVar(&o.once, "once", false, "sync once and exit: 0 on success, 1 with the reason on failure (not in --proxy-mode userspace, whose forwarders live in the agent's process)")
	fs.BoolVar(&o.kubeProxyMetrics, "kube-proxy-metrics", true, "export the metrics under kube-proxy's names (kubeproxy_*) too, beside proxykit_*")
	fs.StringVar(from, "from", "", "explain: where the packet comes from: pod (a pod on this node), node (a process on this node) or outside; default inferred from SRC")
	addTroubleshootFlags(fs, o)

	for _, grp := range g.groups {
		g.all.AddFlagSet(grp)
	}
	g.all.SetOutput(out)
	g.all.Usage = func() {
		fmt.Fprint(out, usageHead)
		for i, grp := range g.groups {
			fmt.Fprintf(out, "\n%s flags:\n%s", g.names[i], grp.FlagUsages())
		}
	}
	return g.all
}

// parse reads args. Flags may come before or after the explain
// subcommand's operands; --from belongs to explain alone.
func parse(args []string, out io.Writer) (*options, error) {
	o := &options{cfg: kpconfig.New(), set: map[string]bool{}}
	var from string
	fs := newFlagSet(o, &from, out)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, &usageError{err.Error()}
	}
	operands := fs.Args()
	fs.Visit(func(f *pflag.Flag) { o.set[f.Name] = true })
	if o.version {
		return o, nil
	}
	if err := o.complete(fs); err != nil {
		return nil, err
	}
	// A file's clientConnection.kubeconfig yields to --manifests: the
	// kubeadm ConfigMap's file can then be tried on manifests.
	if o.manifests != "" && (o.set["kubeconfig"] || o.master != "") {
		return nil, usagef("--kubeconfig and --master are exclusive with --manifests")
	}
	if o.demo && (o.manifests != "" || o.set["kubeconfig"] || o.master != "") {
		return nil, usagef("--demo is exclusive with --manifests, --kubeconfig and --master")
	}
	if o.agent != "" && (o.manifests != "" || o.set["kubeconfig"] || o.master != "" || o.demo) {
		return nil, usagef("--agent reads the running agent's model: --manifests, --kubeconfig, --master and --demo build another")
	}
	if o.once && o.cleanup {
		return nil, usagef("--once and --cleanup are exclusive")
	}
	if o.once && o.proxyMode == "userspace" {
		// Its rules lead to sockets of this process: left behind by a
		// process that exits, they would refuse every connection.
		return nil, usagef("--once cannot run --proxy-mode userspace: its forwarders live in the agent's process, so the agent must stay up to serve what its rules redirect")
	}
	switch {
	case len(operands) == 0:
		if o.set["from"] {
			return nil, usagef("--from applies to explain only")
		}
		if err := checkSubcommandFlags(o); err != nil {
			return nil, err
		}
	case operands[0] == "explain":
		e, err := parseExplain(operands[1:], from)
		if err != nil {
			return nil, err
		}
		if err := checkSubcommandFlags(o, "kernel", "agent"); err != nil {
			return nil, err
		}
		o.explain = e
	case slices.Contains(troubleshootCommands, operands[0]):
		a, err := parseTroubleshoot(operands[0], operands[1:], o)
		if err != nil {
			return nil, err
		}
		o.troubleshoot = a
	default:
		return nil, usagef("unknown command %q", operands[0])
	}
	return o, nil
}

// kubeProxyFlagsWithConfig are the kube-proxy flags a --config file does
// not replace: they are not part of its configuration, or (logging,
// --hostname-override) kube-proxy lets them win over the file. The
// deprecated --healthz-port and --metrics-port are not: kube-proxy applies
// them only without a file.
var kubeProxyFlagsWithConfig = []string{
	"config", "write-config-to", "cleanup", "init-only", "version", "master", "hostname-override",
	"v", "vmodule", "logging-format", "log-flush-frequency", "log-text-split-stream",
	"log-text-info-buffer-size", "log-json-split-stream", "log-json-info-buffer-size",
}

// complete makes o.cfg the effective configuration as kube-proxy does:
// the file's, with the logging flags and --hostname-override given on top,
// or else the flags'; then defaults, validation, and what the agent
// derives from it.
func (o *options) complete(fs *pflag.FlagSet) error {
	if o.configFile != "" {
		codecs, err := kpconfig.NewCodecs()
		if err != nil {
			return err
		}
		d, err := codecs.ReadFile(o.configFile)
		if err != nil {
			return fmt.Errorf("--config %w", err)
		}
		if d.Lenient != nil {
			o.warnf("--config %s: decoded leniently, as kube-proxy does: %v", o.configFile, d.Lenient)
		}
		file := d.Config
		flags := o.cfg
		file.Logging.Verbosity, file.Logging.Format = pick(fs, "v", flags.Logging.Verbosity, file.Logging.Verbosity), pick(fs, "logging-format", flags.Logging.Format, file.Logging.Format)
		file.Logging.VModule = append(pick(fs, "vmodule", flags.Logging.VModule, nil), file.Logging.VModule...)
		file.Logging.FlushFrequency = pick(fs, "log-flush-frequency", flags.Logging.FlushFrequency, file.Logging.FlushFrequency)
		o.cfg = file
		var ignored []string
		fs.Visit(func(f *pflag.Flag) {
			if !slices.Contains(kubeProxyFlagsWithConfig, f.Name) && !slices.Contains(agentFlags, f.Name) {
				ignored = append(ignored, "--"+f.Name)
			}
		})
		if len(ignored) > 0 {
			o.warnf("Ignoring %s: --config is given, and kube-proxy then ignores these flags", strings.Join(ignored, ", "))
		}
	} else {
		o.flagsOnly(fs)
	}
	if o.hostnameOverride != "" {
		h := strings.ToLower(strings.TrimSpace(o.hostnameOverride))
		if h == "" {
			return usagef("--hostname-override: empty name")
		}
		o.cfg.HostnameOverride = h
	}
	kpconfig.Complete(o.cfg)
	extra := []v1alpha1.ProxyMode{kpconfig.ModeUserspace}
	if errs := kpconfig.Validate(o.cfg, kpconfig.ValidateOptions{ExtraModes: extra}); len(errs) > 0 {
		if o.configFile != "" {
			return usagef("--config %s: %s", o.configFile, errs.ToAggregate().Error())
		}
		// Without a file the user gave flags: name them.
		for _, e := range errs {
			path := strings.Split(e.Field, "[")[0]
			if f, ok := fieldFlags[path]; ok {
				e.Field = "--" + f
			}
		}
		return usagef("%s", errs.ToAggregate().Error())
	}
	if o.logSplit[0] || o.logSplit[1] {
		return usagef("--log-text-split-stream and --log-json-split-stream are not supported: the agent writes every log line to stderr")
	}
	return o.derive()
}

func pick[T any](fs *pflag.FlagSet, name string, flag, file T) T {
	if fs.Changed(name) {
		return flag
	}
	return file
}

// fieldFlags names the flag that sets a configuration field.
var fieldFlags = map[string]string{
	"mode": "proxy-mode", "clusterCIDR": "cluster-cidr", "nodePortAddresses": "nodeport-addresses",
	"bindAddress": "bind-address", "healthzBindAddress": "healthz-bind-address", "metricsBindAddress": "metrics-bind-address",
	"detectLocalMode": "detect-local-mode", "detectLocal.bridgeInterface": "pod-bridge-interface",
	"detectLocal.interfaceNamePrefix": "pod-interface-name-prefix", "featureGates": "feature-gates",
	"iptables.masqueradeBit": "iptables-masquerade-bit", "iptables.syncPeriod": "iptables-sync-period",
	"iptables.minSyncPeriod": "iptables-min-sync-period", "nftables.syncPeriod": "iptables-sync-period",
	"nftables.minSyncPeriod": "iptables-min-sync-period", "ipvs.syncPeriod": "ipvs-sync-period",
	"ipvs.minSyncPeriod": "ipvs-min-sync-period", "ipvs.excludeCIDRs": "ipvs-exclude-cidrs",
	"ipvs.tcpTimeout": "ipvs-tcp-timeout", "ipvs.tcpFinTimeout": "ipvs-tcpfin-timeout", "ipvs.udpTimeout": "ipvs-udp-timeout",
	"oomScoreAdj": "oom-score-adj", "conntrack.maxPerCore": "conntrack-max-per-core", "conntrack.min": "conntrack-min",
	"conntrack.tcpEstablishedTimeout": "conntrack-tcp-timeout-established", "conntrack.tcpCloseWaitTimeout": "conntrack-tcp-timeout-close-wait",
	"conntrack.udpTimeout": "conntrack-udp-timeout", "conntrack.udpStreamTimeout": "conntrack-udp-timeout-stream",
	"clientConnection.burst": "kube-api-burst", "configSyncPeriod": "config-sync-period", "logging.format": "logging-format",
}

// agentFlags are the agent's own flags, which kube-proxy does not have.
var agentFlags = append([]string{"manifests", "demo", "dry-run", "once", "from", "kube-proxy-metrics"}, troubleshootFlagNames...)

// flagsOnly applies the flags that kube-proxy keeps outside its
// configuration: the sync periods of the mode, the cluster CIDRs and the
// deprecated ports.
func (o *options) flagsOnly(fs *pflag.FlagSet) {
	c := o.cfg
	ipvs := c.Mode == kpconfig.ModeIPVS
	sync, min := kpconfig.Periods(c)
	if fs.Changed("iptables-sync-period") && !ipvs {
		sync.Duration = o.iptablesSyncPeriod
	}
	if fs.Changed("iptables-min-sync-period") && !ipvs {
		min.Duration = o.iptablesMinSyncPeriod
	}
	if fs.Changed("ipvs-sync-period") && ipvs {
		sync.Duration = o.ipvsSyncPeriod
	}
	if fs.Changed("ipvs-min-sync-period") && ipvs {
		min.Duration = o.ipvsMinSyncPeriod
	}
	if fs.Changed("cluster-cidr") {
		c.ClusterCIDR = o.clusterCIDR
	}
	if c.Mode == kpconfig.ModeNFTables {
		// --masquerade-all is the mode's setting, as in kube-proxy.
		c.NFTables.MasqueradeAll, c.IPTables.MasqueradeAll = c.IPTables.MasqueradeAll, false
	}
	c.HealthzBindAddress = addressWithPort(c.HealthzBindAddress, o.healthzPort, fs.Changed("healthz-port"))
	c.MetricsBindAddress = addressWithPort(c.MetricsBindAddress, o.metricsPort, fs.Changed("metrics-port"))
}

// addressWithPort applies a deprecated --*-port flag: 0 disables the
// server, another port replaces the address's.
func addressWithPort(addr string, port int32, given bool) string {
	switch {
	case !given:
		return addr
	case port == 0:
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

func (o *options) warnf(format string, args ...any) {
	o.warnings = append(o.warnings, fmt.Sprintf(format, args...))
}

// derive sets what the agent runs from o.cfg, refusing what it cannot do
// and warning about what has no effect here.
func (o *options) derive() error {
	c := o.cfg
	o.proxyMode = string(c.Mode)
	o.verbosity = int(c.Logging.Verbosity)
	sync, min := kpconfig.Periods(c)
	o.syncPeriod, o.minSyncPeriod = sync.Duration, min.Duration
	o.masqueradeAll = *kpconfig.MasqueradeAll(c)
	var err error
	if c.DetectLocalMode == kpconfig.LocalClusterCIDR || c.ClusterCIDR != "" {
		if o.clusterCIDRs, err = parseCIDRs(c.ClusterCIDR, false); err != nil {
			return usagef("clusterCIDR (--cluster-cidr) %q: %v", c.ClusterCIDR, err)
		}
	}
	var rest []string
	for _, a := range c.NodePortAddresses {
		if strings.TrimSpace(a) == "primary" {
			o.nodePortPrimary = true
		} else {
			rest = append(rest, a)
		}
	}
	if o.nodePortAddresses, err = parseCIDRs(strings.Join(rest, ","), true); err != nil {
		return usagef("nodePortAddresses (--nodeport-addresses): %v", err)
	}
	if c.Mode != kpconfig.ModeNFTables && *c.IPTables.MasqueradeBit == 0 {
		return usagef("iptables.masqueradeBit (--iptables-masquerade-bit) 0 is not supported: proxykit's iptables dataplane takes bits 1 to 31")
	}
	o.warnUnused()
	return nil
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
	c := o.cfg
	s := dataplane.Settings{
		MasqueradeAll:     o.masqueradeAll,
		NodePortAddresses: o.nodePortAddresses,
		// kube-proxy's nftables mode serves node ports on the node's
		// primary IPs unless told otherwise.
		NodePortPrimary:    o.nodePortPrimary || o.proxyMode == "nftables" && len(c.NodePortAddresses) == 0,
		LocalhostNodePorts: *c.IPTables.LocalhostNodePorts,
	}
	switch c.DetectLocalMode {
	case kpconfig.LocalClusterCIDR:
		if len(o.clusterCIDRs) > 0 {
			s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, CIDRs: o.clusterCIDRs}
		}
	case kpconfig.LocalNodeCIDR:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR}
	case kpconfig.LocalBridgeInterface:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: c.DetectLocal.BridgeInterface}
	case kpconfig.LocalInterfaceNamePrefix:
		s.LocalDetector = dataplane.LocalDetector{Mode: dataplane.LocalModeInterfaceNamePrefix, Interface: c.DetectLocal.InterfaceNamePrefix}
	}
	return s
}
