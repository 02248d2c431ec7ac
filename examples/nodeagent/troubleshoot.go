package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os/exec"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/nftables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/troubleshoot"
	"github.com/spf13/pflag"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// troubleshootCommands are the subcommands that answer from the model and
// the kernel, beside explain.
var troubleshootCommands = []string{"diagnose", "verify", "list"}

// troubleshootFlags are the flags of the troubleshooting subcommands.
type troubleshootFlags struct {
	output, client, namespace, name, typ string
	kernel                               bool
}

// troubleshootFlagNames are troubleshootFlags' names, agent flags all.
var troubleshootFlagNames = []string{"output", "kernel", "client", "namespace", "name", "type", "agent", "verify-period"}

func addTroubleshootFlags(fs *pflag.FlagSet, o *options) {
	f := &o.tflags
	fs.StringVarP(&f.output, "output", "o", "", "diagnose, verify, list: json prints JSON instead of text")
	fs.BoolVar(&f.kernel, "kernel", false, "explain, diagnose: also read the kernel's rules (iptables-save; nft list table in mode nftables; in mode ipvs, the virtual servers, link addresses, ipsets and chains; in mode userspace, also the listening sockets) and trace packets through them; diagnose also reads conntrack")
	fs.StringVar(&f.client, "client", "", "diagnose: a client IP whose packets to the service's frontends are followed (source ranges, family)")
	fs.StringVar(&f.namespace, "namespace", "", "list: only services of this namespace")
	fs.StringVar(&f.name, "name", "", "list: only services of this name")
	fs.StringVar(&f.typ, "type", "", "list: only frontends of this type: ClusterIP, ExternalIP, LoadBalancer, NodePort")
	fs.StringVar(&o.agent, "agent", "", "explain, diagnose, verify, list: answer from the model of the agent running on this node, read from its metrics server at this address (its --metrics-bind-address, e.g. 127.0.0.1:10249), instead of building one from --manifests or the cluster")
	fs.DurationVar(&o.verifyPeriod, "verify-period", 0, "compare the kernel's rules with the model this often, logging and counting drift in proxykit_verify_drifts (0: never)")
}

// troubleshootArgs is a parsed diagnose, verify or list command line.
type troubleshootArgs struct {
	command string
	// service and port are diagnose's NAMESPACE/SERVICE[:PORT].
	service types.NamespacedName
	port    string
	client  netip.Addr
	json    bool
	filter  troubleshoot.Filter
}

// parseTroubleshoot checks the operands and flags of command.
func parseTroubleshoot(command string, operands []string, o *options) (*troubleshootArgs, error) {
	f := o.tflags
	a := &troubleshootArgs{command: command}
	switch f.output {
	case "", "text":
	case "json":
		a.json = true
	default:
		return nil, usagef("%s: --output %q is not text or json", command, f.output)
	}
	only := func(flag string, commands ...string) error {
		if o.set[flag] && !slices.Contains(commands, command) {
			return usagef("--%s applies to %s only", flag, strings.Join(commands, " and "))
		}
		return nil
	}
	if o.set["from"] {
		return nil, usagef("--from applies to explain only")
	}
	for _, err := range []error{only("kernel", "explain", "diagnose"), only("client", "diagnose"), only("namespace", "list"),
		only("name", "list"), only("type", "list")} {
		if err != nil {
			return nil, err
		}
	}
	switch command {
	case "diagnose":
		if len(operands) != 1 {
			return nil, usagef("diagnose needs NAMESPACE/SERVICE[:PORT], e.g. diagnose default/web:http")
		}
		nsName, port, _ := strings.Cut(operands[0], ":")
		ns, name, ok := strings.Cut(nsName, "/")
		if !ok || ns == "" || name == "" {
			return nil, usagef("diagnose: %q is not NAMESPACE/SERVICE[:PORT]", operands[0])
		}
		a.service, a.port = types.NamespacedName{Namespace: ns, Name: name}, port
		if f.client != "" {
			c, err := netip.ParseAddr(f.client)
			if err != nil {
				return nil, usagef("diagnose: --client %q is not an IP address", f.client)
			}
			a.client = c.Unmap()
		}
	case "list":
		if len(operands) != 0 {
			return nil, usagef("list takes no operands; filter with --namespace, --name and --type")
		}
		a.filter = troubleshoot.Filter{Namespace: f.namespace, Name: f.name, Type: f.typ}
		if t := f.typ; t != "" && !slices.ContainsFunc([]string{troubleshoot.TypeClusterIP, troubleshoot.TypeExternalIP, troubleshoot.TypeLoadBalancer, troubleshoot.TypeNodePort},
			func(s string) bool { return strings.EqualFold(s, t) }) {
			return nil, usagef("list: --type %q is not ClusterIP, ExternalIP, LoadBalancer or NodePort", t)
		}
	case "verify":
		if len(operands) != 0 {
			return nil, usagef("verify takes no operands")
		}
	}
	return a, nil
}

// checkSubcommandFlags refuses the subcommands' flags, but allowed, on a
// command line that is not theirs.
func checkSubcommandFlags(o *options, allowed ...string) error {
	for _, f := range []string{"output", "kernel", "client", "namespace", "name", "type", "agent"} {
		if o.set[f] && !slices.Contains(allowed, f) {
			return usagef("--%s applies to a subcommand only (see --help)", f)
		}
	}
	return nil
}

// runTroubleshoot runs diagnose, verify or list on the model the source
// gives, as explain does, and on this machine's kernel.
func runTroubleshoot(ctx context.Context, o *options, h host, log logr.Logger, src *input, stdout, stderr io.Writer) int {
	a := o.troubleshoot
	states, err := o.modelStates(ctx, log, src, v1.IPv4Protocol, v1.IPv6Protocol)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: %s: %v\n", a.command, err)
		return exitFailure
	}
	switch a.command {
	case "list":
		rows := troubleshoot.List(states, a.filter)
		if a.json {
			return writeJSON(stdout, stderr, rows)
		}
		if err := troubleshoot.WriteList(stdout, rows); err != nil {
			return exitFailure
		}
		return exitOK
	case "verify":
		return verify(ctx, o, h, log, states, stdout, stderr)
	}
	cfg := troubleshoot.Config{Mode: dataplane.Mode(o.proxyMode), Client: a.client}
	if o.tflags.kernel {
		cfg.Kernel = map[v1.IPFamily]troubleshoot.Kernel{}
		for _, st := range states {
			k, err := o.kernelOf(ctx, h, log, st)
			if err != nil {
				fmt.Fprintf(stderr, "nodeagent: diagnose --kernel: %v\n", err)
				return exitFailure
			}
			if k != nil {
				cfg.Kernel[st.Family] = k
			}
			if h.flows == nil {
				continue
			}
			flows, err := h.flows(ctx, st.Family)
			if err != nil {
				fmt.Fprintf(stderr, "nodeagent: diagnose --kernel: %v\n", err)
				return exitFailure
			}
			cfg.Flows = append(cfg.Flows, flows...)
		}
	}
	r := troubleshoot.Diagnose(states, a.service, a.port, cfg)
	if a.json {
		writeJSON(stdout, stderr, r)
	} else if err := r.WriteText(stdout); err != nil {
		return exitFailure
	}
	if !r.OK {
		return exitFailure
	}
	return exitOK
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// errNoKernelReading is a mode whose kernel the agent cannot read.
var errNoKernelReading = errors.New("reading the kernel's rules is built for --proxy-mode iptables, nftables, ipvs and userspace")

// listeningSockets reads the TCP and UDP sockets of this network
// namespace that listen, of both families, with the addresses they are
// bound to: a forwarder for a REDIRECT listens on loopback, one for a
// node port on every address, one for a TPROXY on the service address
// (a REDIRECT or node port's DNAT is read as leading to the unspecified
// address, which any socket on the port takes), a dual-stack socket
// under AF_INET6. A TPROXY to a cluster IP finds only a socket on that
// address or on every address, not another service address's on the same
// port.
func listeningSockets() (func(v1.Protocol, netip.AddrPort) bool, error) {
	var open userspace.ListeningSockets
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		tcp, err := netlink.SocketDiagTCP(family)
		if err != nil {
			return nil, fmt.Errorf("listing the TCP sockets: %w", err)
		}
		for _, s := range tcp {
			if s.State == netlink.TCP_LISTEN {
				open.Add(v1.ProtocolTCP, boundTo(s))
			}
		}
		udp, err := netlink.SocketDiagUDP(family)
		if err != nil {
			return nil, fmt.Errorf("listing the UDP sockets: %w", err)
		}
		for _, s := range udp {
			// A forwarder's socket is bound, not connected.
			if s.ID.Destination == nil || s.ID.Destination.IsUnspecified() {
				open.Add(v1.ProtocolUDP, boundTo(s))
			}
		}
	}
	return open.Listening, nil
}

// boundTo is the address and port s is bound to, unmapped: netlink gives
// an IPv4 socket's address in IPv6 form.
func boundTo(s *netlink.Socket) netip.AddrPort {
	a, _ := netip.AddrFromSlice(s.ID.Source)
	return netip.AddrPortFrom(a.Unmap(), s.ID.SourcePort)
}

// kernelReading is a dataplane's reading of the kernel that can also say
// which rules a packet met.
type kernelReading interface {
	troubleshoot.Kernel
	TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error)
}

// kernelOf reads the rules of st's family from the kernel as the mode's
// dataplane wrote them; nil (and no error) for an IPv6 whose tools are
// missing, as the agent then proxies IPv4 alone. st is the model the
// reading is compared with, which names IPVS's frontends.
func (o *options) kernelOf(ctx context.Context, h host, log logr.Logger, st *dataplane.State) (kernelReading, error) {
	if o.dryRun {
		return nil, errors.New("a dry run reads no kernel")
	}
	family, nodeIPs := st.Family, st.Node.IPs
	switch o.proxyMode {
	case "ipvs":
		return ipvsReading(ctx, h, log, st)
	case "iptables":
		return iptablesKernel(ctx, h, log, family, nodeIPs)
	case "userspace":
		k, err := iptablesKernel(ctx, h, log, family, nodeIPs)
		if k == nil || err != nil {
			return nil, err
		}
		u := &userspace.Reading{IPTables: k.(*xtables.Reading), Model: st}
		if h.listening != nil {
			if u.Listening, err = h.listening(); err != nil {
				return nil, err
			}
		}
		return u, nil
	case "nftables":
		if h.nftListing == nil {
			return nil, errors.New("nft cannot be read here")
		}
		listing, err := h.nftListing(ctx, family)
		switch {
		case errors.Is(err, errNoTable):
			listing = nil
		case err != nil && family == v1.IPv6Protocol:
			log.V(1).Info("IPv6 rules not read: nft is not usable", "err", err)
			return nil, nil
		case err != nil:
			return nil, err
		}
		k, err := nftables.NewReading(listing, family, nodeIPs)
		if err != nil || h.nftRuleset == nil {
			return k, err
		}
		ruleset, err := h.nftRuleset(ctx)
		if err == nil {
			k.Others, err = nftables.ParseOthers(ruleset, family, string(nftFamily(family))+" "+nftables.DefaultTable)
		}
		if err != nil {
			log.Info("Other programs' nftables tables not read: one that decides first is not seen", "family", family, "err", err)
			return k, nil
		}
		if t := k.Others.Tables(); len(t) > 0 {
			log.V(1).Info("Other nftables tables read", "family", family, "tables", t)
		}
		return k, nil
	}
	return nil, fmt.Errorf("--proxy-mode %s: %w", o.proxyMode, errNoKernelReading)
}

// listNFTRuleset runs "nft list ruleset": every table, the agent's too.
func listNFTRuleset(ctx context.Context) ([]byte, error) {
	return runNFT(ctx, "list", "ruleset")
}

// runNFT runs nft with args and returns what it printed.
func runNFT(ctx context.Context, args ...string) ([]byte, error) {
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "nft", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// errNoTable is the agent's nftables table missing from the kernel.
var errNoTable = errors.New("no table")

// listNFTable reads family's table of the agent over netlink, as "nft
// list table" would print it: no nft binary is needed, unless another
// program put a rule in the table that only nft can print; then nft lists
// it where it is installed, and the error names the rule where it is not.
func listNFTable(ctx context.Context, family v1.IPFamily) ([]byte, error) {
	b, err := nftables.ListTable(ctx, family, nftables.DefaultTable)
	var foreign *nftables.ForeignRuleError
	switch {
	case err == nil && b == nil:
		return nil, errNoTable
	case errors.As(err, &foreign):
		if _, lookErr := exec.LookPath("nft"); lookErr != nil {
			return nil, err
		}
		out, nftErr := runNFT(ctx, "list", "table", string(foreign.Family), foreign.Table)
		if nftErr != nil {
			return nil, fmt.Errorf("%w (and %v)", err, nftErr)
		}
		return out, nil
	}
	return b, err
}

// iptablesKernel reads family's nat, filter and mangle tables: mangle
// holds userspace mode's TPROXY and drops, and another program's rules
// there decide ahead of nat in any mode.
func iptablesKernel(ctx context.Context, h host, log logr.Logger, family v1.IPFamily, nodeIPs []netip.Addr) (kernelReading, error) {
	r, err := h.runner(family)
	switch {
	case err != nil && family == v1.IPv6Protocol:
		log.V(1).Info("IPv6 rules not read: ip6tables is not usable", "err", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	var save []byte
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := r.Save(ctx, table)
		if err != nil {
			return nil, err
		}
		save = append(save, out...)
	}
	k := xtables.NewReading(save, nodeIPs)
	if h.ipsets != nil && bytes.Contains(save, []byte("--match-set")) {
		// Other programs' set rules match as the kernel's do.
		sets, err := h.ipsets()
		if err != nil {
			log.Info("The node's ipsets not read: rules that match a set are taken as not matching", "err", err)
		} else {
			k.Rules.SetIPSets(sets)
		}
	}
	for _, s := range k.Skipped {
		log.V(1).Info("Rule not modelled: a trace may miss what it does", "family", family, "rule", s.String())
	}
	if n := len(k.Skipped); n > 0 {
		log.Info("Some rules of other programs are not modelled: a trace may miss what they do (-v=1 lists them)", "family", family, "rules", n)
	}
	return k, nil
}

// verify compares the kernel with the model for every family and prints
// the drift; it fails when there is any.
func verify(ctx context.Context, o *options, h host, log logr.Logger, states []*dataplane.State, stdout, stderr io.Writer) int {
	drift := []troubleshoot.Mismatch{}
	var families []string
	ports := 0
	for _, st := range states {
		k, err := o.kernelOf(ctx, h, log, st)
		if err != nil {
			fmt.Fprintf(stderr, "nodeagent: verify: %v\n", err)
			return exitFailure
		}
		if k == nil {
			continue
		}
		families = append(families, string(st.Family))
		ports += st.Services.Len()
		drift = append(drift, troubleshoot.Verify(st, dataplane.Mode(o.proxyMode), k)...)
	}
	if o.troubleshoot.json {
		writeJSON(stdout, stderr, drift)
	} else {
		for _, d := range drift {
			fmt.Fprintln(stdout, d.String())
		}
	}
	if len(drift) > 0 {
		var names []string
		for _, d := range drift {
			if d.Service.Name == "" {
				// A frontend the kernel serves for no service port.
				names = append(names, d.Frontend)
				continue
			}
			names = append(names, troubleshoot.ServiceString(d.Service))
		}
		slices.Sort(names)
		fmt.Fprintf(stderr, "nodeagent: verify: the kernel's rules differ from the model for %s\n", strings.Join(slices.Compact(names), ", "))
		return exitFailure
	}
	if !o.troubleshoot.json {
		fmt.Fprintf(stdout, "OK: the kernel's rules do what the model says for %d service ports (%s)\n", ports, strings.Join(families, ", "))
	}
	return exitOK
}

// explainKernel traces p through the kernel's rules, chain by chain, and
// says whether they agree with the model's verdict.
func explainKernel(ctx context.Context, o *options, h host, log logr.Logger, st *dataplane.State, p dataplane.Packet, model dataplane.Verdict, stdout, stderr io.Writer) int {
	k, err := o.kernelOf(ctx, h, log, st)
	if err == nil && k == nil {
		err = fmt.Errorf("the %s rules cannot be read", st.Family)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: explain --kernel: %v\n", err)
		return exitFailure
	}
	v, steps, err := k.TraceSteps(p)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: explain --kernel: %v\n", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, "\nkernel rules the packet meets:")
	if len(steps) == 0 {
		fmt.Fprintln(stdout, "  none")
	}
	for _, s := range steps {
		fmt.Fprintln(stdout, "  "+s)
	}
	fmt.Fprintf(stdout, "%-11s %s\n", "kernel:", troubleshoot.Summary(v))
	if kind, detail := troubleshoot.Compare(model, v); kind != "" {
		fmt.Fprintf(stdout, "%-11s %s: %s\n", "DISAGREES:", kind, detail)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%-11s %s\n", "agrees:", "yes, the kernel does what the model says")
	return exitOK
}
