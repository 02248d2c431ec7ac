package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/informer"
	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/textlogger"
)

// run is the whole program: it parses args, does what they say, and returns
// the exit code. Everything it prints goes to stdout (what was asked for:
// rules, explanations) or stderr (logs, errors).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "nodeagent: %v (see --help)\n", err)
		return exitUsage
	}
	if len(args) == 0 {
		// The README's first command: show the rules for the demo.
		o.dryRun, o.once = true, true
	}
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(o.verbosity), textlogger.Output(stderr)))
	// explain asks the model, which every mode implements alike.
	if o.explain == nil {
		if err := checkMode(o.proxyMode); err != nil {
			fmt.Fprintf(stderr, "nodeagent: %v\n", err)
			return exitFailure
		}
	}
	src, err := o.openSource(ctx, log)
	if err != nil {
		fmt.Fprintf(stderr, "nodeagent: %v\n", err)
		return exitFailure
	}
	defer src.close()
	if o.explain != nil {
		return explain(ctx, o, log, src, stdout, stderr)
	}
	if err := o.runProxy(ctx, log, src, stdout); err != nil {
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

// input is where the objects come from, and what goes with it.
type input struct {
	source.Source
	// nodeName is this node's name.
	nodeName string
	// demo is set for the bundled demo manifests, which never change.
	demo     bool
	recorder proxykit.EventRecorder
	close    func()
}

func (o *options) openSource(ctx context.Context, log logr.Logger) (*input, error) {
	s := &input{nodeName: o.hostnameOverride, close: func() {}}
	var cfg *rest.Config
	var err error
	switch {
	case o.manifests != "":
		s.Source = manifest.New(o.manifests, manifest.Config{Logger: log})
	case o.kubeconfig != "":
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	default:
		objs, err := demoObjects()
		if err != nil {
			return nil, err
		}
		s.Source, s.demo = source.Static(objs), true
		if s.nodeName == "" {
			s.nodeName = demoNodeName
		}
	}
	if s.nodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostname: %w (use --hostname-override)", err)
		}
		s.nodeName = h
	}
	// kube-proxy normalizes the name the same way.
	s.nodeName = strings.ToLower(strings.TrimSpace(s.nodeName))
	if cfg != nil {
		cfg.UserAgent = "proxykit-nodeagent"
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		s.Source = informer.New(client, informer.Config{NodeName: s.nodeName, Logger: log})
		if o.explain == nil {
			b := record.NewBroadcaster(record.WithContext(ctx))
			b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
			s.recorder = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "proxykit-nodeagent", Host: s.nodeName})
			s.close = b.Shutdown
		}
	}
	return s, nil
}

// families returns the IP families to proxy. A dry run shows both. A real
// run always programs IPv4 and adds IPv6 when ip6tables works, as
// kube-proxy goes dual-stack when both families' tools do.
func (o *options) families(log logr.Logger) []v1.IPFamily {
	if o.dryRun {
		return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	}
	if _, err := iptables.NewExecRunner(iptables.ExecConfig{Family: v1.IPv6Protocol}); err != nil {
		log.Info("IPv6 is not proxied: ip6tables is not usable", "err", err)
		return []v1.IPFamily{v1.IPv4Protocol}
	}
	return []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
}

func (o *options) runProxy(ctx context.Context, log logr.Logger, src *input, stdout io.Writer) error {
	out := &syncWriter{w: stdout}
	reg := prometheus.NewRegistry()
	var planes []proxykit.DataplaneConfig
	for _, f := range o.families(log) {
		cfg := iptables.Config{Family: f, Logger: log, Registerer: reg}
		if o.dryRun {
			fake := iptables.NewFakeRunner()
			fake.Output = &headerWriter{w: out, header: fmt.Sprintf("# iptables-restore input (%s)\n", f)}
			cfg.Runner = fake
		}
		d, err := iptables.New(cfg)
		if err != nil {
			return err
		}
		planes = append(planes, proxykit.DataplaneConfig{Family: f, Dataplane: d})
	}
	if o.cleanup {
		return o.runCleanup(ctx, planes)
	}
	cfg := proxykit.Config{
		NodeName:      src.nodeName,
		Dataplanes:    planes,
		Sources:       []source.Source{src},
		Settings:      o.settings(),
		MinSyncPeriod: o.minSyncPeriod,
		SyncPeriod:    o.syncPeriod,
		Registerer:    reg,
		Logger:        log,
		Recorder:      src.recorder,
	}
	if o.minSyncPeriod == 0 {
		cfg.MinSyncPeriod = -1
	}
	// A dry run binds nothing it was not asked to: it must run anywhere,
	// unprivileged, next to a real kube-proxy.
	if !o.dryRun || o.set["healthz-bind-address"] {
		cfg.HealthzBindAddress = o.healthzBindAddress
	}
	if !o.dryRun || o.set["metrics-bind-address"] {
		cfg.MetricsBindAddress = o.metricsBindAddress
	}
	if o.dryRun {
		// Nothing was programmed, so nothing is stale, and health-check
		// node ports would bind ports of the machine.
		cfg.DisableHealthCheckNodePorts = true
	} else {
		cfg.Conntrack = conntrack.New(conntrack.Config{Logger: log})
	}
	p, err := proxykit.New(cfg)
	if err != nil {
		return err
	}
	// The demo manifests never change: one sync shows everything.
	if o.once || (o.dryRun && src.demo) {
		if err := p.RunOnce(ctx); err != nil {
			return fmt.Errorf("sync failed: %w", err)
		}
		return nil
	}
	return p.Run(ctx)
}

func (o *options) runCleanup(ctx context.Context, planes []proxykit.DataplaneConfig) error {
	if o.dryRun {
		return errors.New("--cleanup with --dry-run: a dry run programs nothing, so there is nothing to remove")
	}
	var errs []error
	for _, pl := range planes {
		if err := pl.Dataplane.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("cleanup %s (%s): %w", pl.Dataplane.Name(), pl.Family, err))
		}
	}
	return errors.Join(errs...)
}

// syncWriter serializes the dry-run output of the dataplanes, which may
// sync from different goroutines.
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
