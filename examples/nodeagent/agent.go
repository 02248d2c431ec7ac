package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/userspace"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/source"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"
)

// run is the whole program: it parses args, does what they say, and returns
// the exit code. Everything it prints goes to stdout (what was asked for:
// rules, explanations) or stderr (logs, errors).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runOn(ctx, machine(), args, stdout, stderr)
}

// host is the agent's door to the machine: each family's iptables tools
// and the conntrack table. Tests replace it with fakes.
type host struct {
	// runner returns family's iptables Runner, or why its tools cannot be
	// used.
	runner func(family v1.IPFamily) (xtables.Runner, error)
	// nft returns family's nftables interface for the agent's table, or
	// why nft cannot be used.
	nft func(family v1.IPFamily) (knftables.Interface, error)
	// ipvs returns family's IPVS kernel, or why IPVS cannot
	// be used (wrapping ipvs.ErrNoIPVS without the ip_vs module).
	ipvs func(family v1.IPFamily) (ipvs.Kernel, error)
	// probeIPVS says whether the kernel has IPVS without loading it, for
	// the cleanup of mode ipvs's objects from another mode; nil has none.
	probeIPVS func() error
	// routing opens the policy routing of mode userspace; nil has none.
	routing func() (userspace.PolicyRouting, error)
	// conntrack returns the stale-flow cleaner; nil cleans nothing.
	conntrack func(log logr.Logger) proxykit.ConntrackCleaner
	// nftListing returns what "nft list table" prints of family's table
	// of the agent, for verify and --kernel; nil cannot read it.
	nftListing func(ctx context.Context, family v1.IPFamily) ([]byte, error)
	// nftRuleset returns what "nft list ruleset" prints, for the other
	// tables verify and --kernel follow in mode nftables; nil reads the
	// agent's table alone.
	nftRuleset func(ctx context.Context) ([]byte, error)
	// ipsets lists the node's ipsets, for the iptables readings' "-m set"
	// matches; nil reads none (they then match nothing).
	ipsets func() (map[string]xtables.IPSet, error)
	// listening reads at which addresses and ports the node's TCP and
	// UDP sockets listen, for --kernel in mode userspace; nil takes every
	// forwarder to be listening.
	listening func() (func(v1.Protocol, netip.AddrPort) bool, error)
	// flows lists family's DNATed conntrack entries, for diagnose; nil
	// reads none.
	flows func(ctx context.Context, family v1.IPFamily) ([]conntrack.Flow, error)
	// node holds the machine-wide settings made at start (conntrack
	// sysctls, OOM score); nil makes none.
	node *nodeSettings
}

// machine is the host the agent runs on.
func machine() host {
	return host{
		runner: func(f v1.IPFamily) (xtables.Runner, error) {
			r, err := xtables.NewExecRunner(xtables.ExecConfig{Family: f})
			if err != nil {
				return nil, err
			}
			return r, nil
		},
		nft:       realNFT,
		ipvs:      realIPVS,
		probeIPVS: ipvs.Probe,
		routing: func() (userspace.PolicyRouting, error) {
			r, err := userspace.OpenNetlinkRouting()
			if err != nil {
				return nil, err
			}
			return r, nil
		},
		conntrack: func(log logr.Logger) proxykit.ConntrackCleaner {
			return conntrack.New(conntrack.Config{Logger: log})
		},
		node:       new(realNodeSettings()),
		nftListing: listNFTable,
		nftRuleset: listNFTRuleset,
		listening:  listeningSockets,
		ipsets:     ipvs.ReadIPSets,
		flows: func(ctx context.Context, f v1.IPFamily) ([]conntrack.Flow, error) {
			return conntrack.DNATFlows(ctx, nil, f)
		},
	}
}

func runOn(ctx context.Context, h host, args []string, stdout, stderr io.Writer) int {
	// Logs come from many goroutines: the proxy's, the dataplanes', client-go's.
	stderr = &syncWriter{w: stderr}
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "nodeagent: %v (see --help)\n", err)
		return exitUsage
	}
	if o.version {
		fmt.Fprintln(stdout, version())
		return exitOK
	}
	if len(args) == 0 {
		// The README's first command: show the rules for the demo.
		o.dryRun, o.once = true, true
	}
	log := o.logger(stderr)
	defer routeKlog(log, o.verbosity)()
	defer routeLibraryLogs(log)()
	for _, w := range o.warnings {
		log.Info(w)
	}
	if o.writeConfigTo != "" {
		if err := o.writeConfig(); err != nil {
			fmt.Fprintf(stderr, "nodeagent: --write-config-to %s: %v\n", o.writeConfigTo, err)
			return exitFailure
		}
		log.Info("Wrote configuration", "file", o.writeConfigTo)
		return exitOK
	}
	// explain asks the model, which every mode implements alike, and so
	// do diagnose and list.
	if o.explain == nil && (o.troubleshoot == nil || o.troubleshoot.command == "verify") {
		if err := checkMode(o.proxyMode); err != nil {
			fmt.Fprintf(stderr, "nodeagent: %v\n", err)
			return exitFailure
		}
	}
	if o.initOnly {
		if err := o.initNode(h, log); err != nil {
			fmt.Fprintf(stderr, "nodeagent: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	var src *input
	if o.agent == "" {
		if src, err = o.openSource(ctx, log); err != nil {
			fmt.Fprintf(stderr, "nodeagent: %v\n", err)
			return exitFailure
		}
		defer src.close()
	}
	if src != nil && src.noSource && o.explain == nil && o.troubleshoot == nil && !o.cleanup {
		if err := o.noSourceDryRun(log); err != nil {
			fmt.Fprintf(stderr, "nodeagent: %v\n", err)
			return exitFailure
		}
	}
	if o.explain != nil {
		return explain(ctx, o, h, log, src, stdout, stderr)
	}
	if o.troubleshoot != nil {
		return runTroubleshoot(ctx, o, h, log, src, stdout, stderr)
	}
	if err := o.runProxy(ctx, h, log, src, stdout); err != nil {
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		return exitFailure
	}
	return exitOK
}

func checkMode(mode string) error {
	if !slices.Contains(builtModes, mode) {
		return fmt.Errorf("--proxy-mode %s: not built yet (built: %s)", mode, strings.Join(builtModes, ", "))
	}
	return nil
}

// routeKlog makes klog's global logger, which client-go logs through, write
// to log, and sets klog's verbosity to v, as kube-proxy's -v does: client-go's
// own lines (caches populated at 2, relists at 3, watches closed at 4, a
// watch ended with an error at 0) appear at the levels they do in
// kube-proxy. The returned function undoes both.
func routeKlog(log logr.Logger, v int) (undo func()) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(v))
	klog.SetLoggerWithOptions(log, klog.ContextualLogger(true))
	return func() {
		klog.ClearLogger()
		_ = fs.Set("v", "0")
	}
}

// familyRunner is one IP family's iptables Runner: on a dry run a
// FakeRunner that prints each restore input (fake), else the host's.
type familyRunner struct {
	family v1.IPFamily
	runner xtables.Runner
	fake   *xtables.FakeRunner
}

// familyRunners returns the Runner of each family to proxy: both on a dry
// run; else IPv4 always and IPv6 when ip6tables works, as kube-proxy goes
// dual-stack when both families' tools do.
func (o *options) familyRunners(h host, log logr.Logger, out io.Writer) ([]familyRunner, error) {
	var rs []familyRunner
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if o.dryRun {
			fake := xtables.NewFakeRunner()
			fake.Output = &headerWriter{w: out, header: fmt.Sprintf("# iptables-restore input (%s)\n", f)}
			rs = append(rs, familyRunner{family: f, runner: fake, fake: fake})
			continue
		}
		r, err := h.runner(f)
		switch {
		case err != nil && f == v1.IPv6Protocol:
			log.Info("IPv6 is not proxied: ip6tables is not usable", "err", err)
			continue
		case err != nil:
			return nil, err
		}
		rs = append(rs, familyRunner{family: f, runner: r})
	}
	return rs, nil
}

// dataplanes returns one iptables dataplane per IP family to proxy, each
// with its Runner (nil for a dry run). A dry run shows both families. A
// real run always programs IPv4 and adds IPv6 when ip6tables works, as
// kube-proxy goes dual-stack when both families' tools do.
func (o *options) dataplanes(h host, log logr.Logger, reg prometheus.Registerer, out io.Writer) ([]plane, error) {
	switch o.proxyMode {
	case "userspace":
		return o.userspacePlanes(h, log, reg)
	case "nftables":
		return o.nftPlanes(h, log, reg, out)
	case "ipvs":
		return o.ipvsPlanes(h, log, out)
	}
	runners, err := o.familyRunners(h, log, out)
	if err != nil {
		return nil, err
	}
	var planes []plane
	for _, fr := range runners {
		f := fr.family
		cfg := iptables.Config{Family: f, Logger: log, Registerer: reg, MasqueradeBit: int(*o.cfg.IPTables.MasqueradeBit), Runner: fr.runner}
		d, err := iptables.New(cfg)
		if err != nil {
			return nil, err
		}
		r := &recorded{Dataplane: d}
		planes = append(planes, plane{Dataplane: r, last: &r.last, family: f, owned: chainsOwned(cfg.Runner, iptables.DefaultChainPrefix)})
	}
	return planes, nil
}

// plane is one family's dataplane, recording the last State it programmed.
type plane struct {
	dataplane.Dataplane
	last   *atomic.Pointer[dataplane.State]
	family v1.IPFamily
	// owned describes what the dataplane owns, for --cleanup: how to say
	// there is nothing, and key-value pairs counting it (all zero when
	// there is nothing).
	owned func(ctx context.Context) (nothing string, counts []any, err error)
	// close releases the kernel handles the dataplane holds; nil holds
	// none the process must release.
	close func()
}

func (o *options) runProxy(ctx context.Context, h host, log logr.Logger, src *input, stdout io.Writer) error {
	start := time.Now()
	reg := src.reg
	// kube-proxy's registry carries the process's and the Go runtime's
	// series (RSS, open files, goroutines): what a leak shows in first.
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	planes, err := o.dataplanes(h, log, reg, &syncWriter{w: stdout})
	if err != nil {
		return err
	}
	if o.cleanup {
		return o.runCleanup(ctx, h, log, planes)
	}
	if !o.dryRun {
		if err := o.initNode(h, log); err != nil {
			return err
		}
		// After this mode's dataplanes were made: a mode the node
		// cannot run leaves the previous one in place.
		o.removeOtherModes(ctx, h, log)
	}
	o.warnMisconfiguration(log)
	cfg := o.proxyConfig()
	cfg.NodeName = src.nodeName
	cfg.Sources = []source.Source{src}
	cfg.Registerer, cfg.Logger, cfg.Recorder = reg, log, src.recorder
	for _, pl := range planes {
		cfg.Dataplanes = append(cfg.Dataplanes, proxykit.DataplaneConfig{Family: pl.family, Dataplane: pl.Dataplane})
	}
	if !o.dryRun && h.conntrack != nil {
		cfg.Conntrack = h.conntrack(log)
	}
	p, err := proxykit.New(cfg)
	if err != nil {
		return err
	}
	// The demo manifests never change: one sync shows everything.
	if o.once || (o.dryRun && src.demo) {
		if err := p.RunOnce(ctx); err != nil {
			return err
		}
		o.logOnce(log, planes, time.Since(start))
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if o.configFile != "" {
		stop, err := watchConfig(o.configFile, cancel)
		if err != nil {
			return err
		}
		defer stop()
	}
	if addr := o.cfg.MetricsBindAddress; addr != "" && (!o.dryRun || o.set["metrics-bind-address"]) {
		stop, err := serve(addr, o.metricsHandler(p, o.gatherer(reg, planes), planes), o.cfg.BindAddressHardFail, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	if o.verifyPeriod > 0 && !o.dryRun {
		stop, err := o.startVerifier(ctx, h, log, reg, planes)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := p.Run(ctx); err != nil {
		return err
	}
	if err := context.Cause(ctx); errors.Is(err, errConfigChanged) {
		return err
	}
	return nil
}

// proxyConfig is the proxy's configuration from the options, less what
// runProxy adds (node name, sources, dataplanes, metrics, logging).
func (o *options) proxyConfig() proxykit.Config {
	cfg := proxykit.Config{
		NodeName:      o.cfg.HostnameOverride,
		Settings:      o.settings(),
		MinSyncPeriod: o.minSyncPeriod,
		SyncPeriod:    o.syncPeriod,
	}
	if o.minSyncPeriod == 0 {
		cfg.MinSyncPeriod = -1
	}
	// A dry run binds nothing it was not asked to: it must run anywhere,
	// unprivileged, next to a real kube-proxy.
	if !o.dryRun || o.set["healthz-bind-address"] {
		cfg.HealthzBindAddress = o.cfg.HealthzBindAddress
	}
	if !o.cfg.BindAddressHardFail {
		cfg.BindRetryPeriod = bindRetryPeriod
	}
	// Nothing was programmed by a dry run, so nothing is stale, and
	// health-check node ports would bind ports of the machine.
	cfg.DisableHealthCheckNodePorts = o.dryRun
	return cfg
}

// initNode makes the machine-wide settings kube-proxy makes at start.
func (o *options) initNode(h host, log logr.Logger) error {
	if o.dryRun {
		return errors.New("--init-only with --dry-run: a dry run changes nothing")
	}
	if h.node == nil {
		return nil
	}
	return h.node.apply(o.cfg, log)
}

// warnMisconfiguration warns, once at start, about settings that are
// allowed but most likely wrong. A dual-stack agent with a cluster CIDR of
// one family is warned about by the proxy's Builder.
func (o *options) warnMisconfiguration(log logr.Logger) {
	if len(o.clusterCIDRs) == 0 && !o.masqueradeAll {
		log.Info("No --cluster-cidr: traffic from outside the cluster to cluster IPs is not masqueraded, so its replies may bypass this node; set --cluster-cidr to the pods' CIDRs")
	}
}

// syncWriter serializes writes from several goroutines: the dry-run
// output of the dataplanes, log lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// headerWriter labels each restore input with the family it programs.
type headerWriter struct {
	w      io.Writer
	header string
}

func (h *headerWriter) Write(p []byte) (int, error) {
	var b bytes.Buffer
	b.WriteString(h.header)
	b.Write(p)
	if _, err := h.w.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// builtStates collects a source's initial objects into a Builder and
// builds the States, for explain.
func builtStates(ctx context.Context, src source.Source, cfg dataplane.BuilderConfig) ([]*dataplane.State, error) {
	b := dataplane.NewBuilder(cfg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := &builderHandler{b: b, nodeName: cfg.NodeName, synced: make(chan struct{})}
	errc := make(chan error, 1)
	go func() { errc <- src.Run(ctx, h) }()
	select {
	case <-h.synced:
	case err := <-errc:
		if err == nil {
			err = errors.New("source stopped before it synced")
		}
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cancel()
	<-errc
	return b.Build().States, nil
}

// builderHandler feeds a source straight into a Builder.
type builderHandler struct {
	b        *dataplane.Builder
	nodeName string
	once     sync.Once
	synced   chan struct{}
}

func (h *builderHandler) OnService(old, new *v1.Service) { h.b.UpdateService(old, new) }
func (h *builderHandler) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	h.b.UpdateEndpointSlice(old, new)
}

// OnNode passes this node's object on; a nil Node tells the Builder that
// its node is gone, so another node's deletion must not reach it.
func (h *builderHandler) OnNode(old, new *v1.Node) {
	switch {
	case new != nil:
		h.b.UpdateNode(new)
	case old != nil && old.Name == h.nodeName:
		h.b.UpdateNode(nil)
	}
}

func (h *builderHandler) Synced() { h.once.Do(func() { close(h.synced) }) }
