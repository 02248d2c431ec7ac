package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/proxykit/proxykit/examples/nodeagent/internal/kpconfig"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// How the agent treats one of kube-proxy's flags or configuration fields.
const (
	supported = "supported"
	differs   = "differs"
	ignored   = "ignored"
	refused   = "refused"
)

// support is one row of the README's tables.
type support struct {
	name, status, note string
}

// kubeProxyFlags are the flags of `kube-proxy --help` (v1.37, Linux), each
// as the agent takes it. A test checks that the agent defines every one
// and that README.md shows this table.
var kubeProxyFlags = []support{
	{"bind-address", differs, "only picks the family of the servers' default addresses; the node's IPs come from its Node object (warned when set to a specific IP)"},
	{"bind-address-hard-fail", supported, ""},
	{"cleanup", supported, "removes what every mode of the agent created, whichever --proxy-mode is given, as kube-proxy's removes every mode's: chains `PK-`, `PKU-` and `PKV-`, tables ip and ip6 proxykit, mode ipvs's virtual servers, addresses, link and ipsets, mode userspace's policy route; with iptables-nft, the built-in chains its jumps were in and their tables, once empty (kube-proxy leaves them); not kube-proxy's"},
	{"cluster-cidr", differs, "an IPv4-mapped IPv6 CIDR (`::ffff:10.0.0.0/104`) is refused at start: it matches no packet of either family"},
	{"config", supported, "see the fields below"},
	{"config-sync-period", supported, "the informers' resync period"},
	{"conntrack-max-per-core", supported, "sets nf_conntrack_max at start"},
	{"conntrack-min", supported, ""},
	{"conntrack-tcp-be-liberal", supported, ""},
	{"conntrack-tcp-timeout-close-wait", supported, ""},
	{"conntrack-tcp-timeout-established", supported, ""},
	{"conntrack-udp-timeout", supported, ""},
	{"conntrack-udp-timeout-stream", supported, ""},
	{"detect-local-mode", supported, ""},
	{"feature-gates", differs, "the proxy's gates only (" + strings.Join(kpconfig.GateNames(), ", ") + "); other components' gates are refused"},
	{"healthz-bind-address", supported, ""},
	{"healthz-port", supported, "deprecated, as in kube-proxy"},
	{"hostname-override", supported, ""},
	{"init-only", supported, "sets the conntrack sysctls and OOM score, then exits"},
	{"iptables-localhost-nodeports", supported, ""},
	{"iptables-masquerade-bit", differs, "0 is refused: proxykit's iptables dataplane takes bits 1 to 31"},
	{"iptables-min-sync-period", supported, ""},
	{"iptables-sync-period", differs, "each period reads the rules back and repairs drift (kube-proxy re-syncs in full hourly)"},
	{"ipvs-exclude-cidrs", ignored, "mode ipvs never touches virtual servers it did not create"},
	{"ipvs-min-sync-period", supported, ""},
	{"ipvs-scheduler", differs, "rr (default), wrr, lc, wlc, lblc, lblcr, dh, sh, mh, sed or nq; another name is refused at start"},
	{"ipvs-strict-arp", supported, ""},
	{"ipvs-sync-period", supported, ""},
	{"ipvs-tcp-timeout", supported, ""},
	{"ipvs-tcpfin-timeout", supported, ""},
	{"ipvs-udp-timeout", supported, ""},
	{"kube-api-burst", supported, ""},
	{"kube-api-content-type", supported, ""},
	{"kube-api-qps", supported, ""},
	{"kubeconfig", supported, ""},
	{"log-flush-frequency", ignored, "the agent's logs are not buffered"},
	{"log-json-info-buffer-size", ignored, "the agent's logs are not buffered"},
	{"log-json-split-stream", refused, "every log line goes to stderr"},
	{"log-text-info-buffer-size", ignored, "the agent's logs are not buffered"},
	{"log-text-split-stream", refused, "every log line goes to stderr"},
	{"logging-format", differs, "text is klog's; json is logr's funcr JSON (keys differ from component-base's zap encoder)"},
	{"masquerade-all", supported, ""},
	{"master", supported, ""},
	{"metrics-bind-address", differs, "empty disables the server"},
	{"metrics-port", supported, "deprecated, as in kube-proxy"},
	{"nodeport-addresses", differs, "an IPv4-mapped IPv6 CIDR (`::ffff:10.0.0.0/104`) is refused at start: it matches no packet of either family"},
	{"oom-score-adj", supported, ""},
	{"pod-bridge-interface", differs, "checked at start in every mode, with the other flags: 1 to 15 bytes of ASCII letters, digits, `-`, `_` and `.`, not `.` or `..`, so that the name fits the rules it is written into (kube-proxy refuses only an empty name, and writes any other into its rules as given)"},
	{"pod-interface-name-prefix", differs, "as --pod-bridge-interface, but `.` and `..` are prefixes like any other"},
	{"profiling", supported, "/debug/pprof on the metrics server"},
	{"proxy-mode", differs, "iptables; nftables (tables ip proxykit and ip6 proxykit; node ports on the primary node IPs unless --nodeport-addresses says otherwise, as kube-proxy); or userspace: Go forwarders behind TPROXY rules for traffic entering the node and REDIRECT rules for its own (chains PKU- in the nat, mangle and filter tables, a policy route of fwmark 0x2000 to table 20555; a forwarder takes only what those rules send it, a service address's listening on loopback and a node port's behind chain PKU-FORWARDERS, which refuses a connection made straight to its port, so that from off the node only what kube-proxy opens answers: /healthz, the health-check node ports, the frontends; no --dry-run nor --once, the forwarders live in the agent's process; the client's address is not kept); or ipvs: virtual servers through netlink, addresses on the dummy link proxykit-ipvs0, ipsets and chains PKV- (node ports on the addresses the node's kernel has, those --nodeport-addresses selects, never on loopback; internal traffic to a service whose traffic policies are both Local reaches only its local endpoints; exits at start on a kernel without the ip_vs module, naming any missing module); at start the agent removes what its other modes left (see \"Switching modes\")"},
	{"show-hidden-metrics-for-version", ignored, "the agent hides no metrics"},
	{"v", supported, ""},
	{"version", differs, "prints the agent's version"},
	{"vmodule", supported, "text format only"},
	{"write-config-to", supported, ""},
}

// configFields are the fields of KubeProxyConfiguration v1alpha1 by their
// path in the file. A test checks the list against the Go type.
var configFields = []support{
	{"bindAddress", differs, "as --bind-address"},
	{"bindAddressHardFail", supported, ""},
	{"clientConnection.acceptContentTypes", supported, ""},
	{"clientConnection.burst", supported, ""},
	{"clientConnection.contentType", supported, ""},
	{"clientConnection.kubeconfig", supported, ""},
	{"clientConnection.qps", supported, ""},
	{"clusterCIDR", differs, "as --cluster-cidr"},
	{"configSyncPeriod", supported, ""},
	{"conntrack.maxPerCore", supported, ""},
	{"conntrack.min", supported, ""},
	{"conntrack.tcpBeLiberal", supported, ""},
	{"conntrack.tcpCloseWaitTimeout", supported, ""},
	{"conntrack.tcpEstablishedTimeout", supported, ""},
	{"conntrack.udpStreamTimeout", supported, ""},
	{"conntrack.udpTimeout", supported, ""},
	{"detectLocal.bridgeInterface", differs, "as --pod-bridge-interface"},
	{"detectLocal.interfaceNamePrefix", differs, "as --pod-interface-name-prefix"},
	{"detectLocalMode", supported, ""},
	{"enableProfiling", supported, "as --profiling"},
	{"featureGates", differs, "as --feature-gates"},
	{"healthzBindAddress", supported, ""},
	{"hostnameOverride", supported, ""},
	{"iptables.localhostNodePorts", supported, ""},
	{"iptables.masqueradeAll", supported, ""},
	{"iptables.masqueradeBit", differs, "as --iptables-masquerade-bit"},
	{"iptables.minSyncPeriod", supported, ""},
	{"iptables.syncPeriod", differs, "as --iptables-sync-period"},
	{"ipvs.excludeCIDRs", ignored, "as --ipvs-exclude-cidrs"},
	{"ipvs.minSyncPeriod", supported, "ignored in other modes, as by kube-proxy"},
	{"ipvs.scheduler", differs, "as --ipvs-scheduler"},
	{"ipvs.strictARP", supported, ""},
	{"ipvs.syncPeriod", supported, "ignored in other modes, as by kube-proxy"},
	{"ipvs.tcpFinTimeout", supported, ""},
	{"ipvs.tcpTimeout", supported, ""},
	{"ipvs.udpTimeout", supported, ""},
	{"logging.flushFrequency", ignored, "as --log-flush-frequency"},
	{"logging.format", differs, "as --logging-format"},
	{"logging.options", differs, "split streams refused, buffer sizes ignored"},
	{"logging.verbosity", supported, ""},
	{"logging.vmodule", supported, "text format only"},
	{"metricsBindAddress", differs, "as --metrics-bind-address"},
	{"mode", differs, "as --proxy-mode"},
	{"nftables.masqueradeAll", supported, "mode nftables"},
	{"nftables.masqueradeBit", supported, "mode nftables"},
	{"nftables.minSyncPeriod", supported, "mode nftables"},
	{"nftables.syncPeriod", supported, "mode nftables"},
	{"nodePortAddresses", differs, "as --nodeport-addresses"},
	{"oomScoreAdj", supported, ""},
	{"portRange", ignored, "ignored by kube-proxy too (warned when set)"},
	{"showHiddenMetricsForVersion", ignored, "warned when set"},
	{"windowsRunAsService", ignored, "Windows only (warned when set)"},
	{"winkernel.enableDSR", ignored, "Windows only (warned when set)"},
	{"winkernel.forwardHealthCheckVip", ignored, "Windows only (warned when set)"},
	{"winkernel.networkName", ignored, "Windows only (warned when set)"},
	{"winkernel.rootHnsEndpointName", ignored, "Windows only (warned when set)"},
	{"winkernel.sourceVip", ignored, "Windows only (warned when set)"},
}

// warnUnused warns, by field, about settings that have no effect here.
func (o *options) warnUnused() {
	c := o.cfg
	for _, f := range []struct {
		field string
		set   bool
		why   string
	}{
		{"portRange", c.PortRange != "", "kube-proxy ignores it too"},
		{"showHiddenMetricsForVersion", c.ShowHiddenMetricsForVersion != "", "the agent hides no metrics"},
		{"windowsRunAsService", c.WindowsRunAsService, "Windows only"},
		{"winkernel", c.Winkernel != (v1alpha1.KubeProxyWinkernelConfiguration{}), "Windows only"},
		{"bindAddress", !netip.MustParseAddr(c.BindAddress).IsUnspecified(), "the agent takes the node's IPs from its Node object"},
	} {
		if f.set {
			o.warnf("Ignoring %s: %s", f.field, f.why)
		}
	}
}

// supportTable renders rows as the README's Markdown table.
func supportTable(head string, rows []support, prefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | status | how |\n|---|---|---|\n", head)
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", prefix, r.name, r.status, r.note)
	}
	return b.String()
}
