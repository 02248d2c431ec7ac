package proxykit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/health"
	"github.com/proxykit/proxykit/internal/logtext"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ErrStarted is returned by Run and RunOnce when the Proxy has already been
// started: a Proxy runs once.
var ErrStarted = errors.New("proxykit: proxy already started")

// Proxy is an assembled service proxy: sources feed a dataplane.Builder,
// a bounded-frequency loop programs the Builder's States into the
// dataplanes, then conntrack is cleaned and health is reported.
type Proxy struct {
	cfg      Config
	log      logr.Logger
	builder  *dataplane.Builder
	families []v1.IPFamily
	planes   []*plane
	health   *health.Tracker
	metrics  *metrics
	runner   *runner
	handler  *proxyHandler

	// nodePorts serves the health-check node ports, one per family; nil
	// when disabled.
	nodePorts map[v1.IPFamily]*health.NodePorts

	started     atomic.Bool
	initialized atomic.Bool
	// nodeSeen is whether a Node named NodeName is currently delivered.
	nodeSeen atomic.Bool

	// Everything below is owned by the sync loop (one sync at a time).
	once         bool
	debt         map[v1.IPFamily]*conntrackDebt
	triggerTimes map[v1.IPFamily][]time.Time
	hcPorts      map[v1.IPFamily]map[types.NamespacedName]uint16
}

// plane is one configured dataplane and what it last programmed.
type plane struct {
	DataplaneConfig
	// programmed is true once a Sync succeeded; last is the State it
	// programmed then. A dataplane that failed is not advanced, so the
	// next State's ChangedFrom(last) is not ok and it programs that State
	// in full.
	programmed bool
	last       *dataplane.State
	// mustReconcile is set after a failed Reconcile, so that the repair
	// is retried with the next sync rather than a period later.
	mustReconcile bool
	// lastReconcile is when the dataplane last read back and repaired
	// what it programmed (or, if it cannot, programmed it in full).
	lastReconcile time.Time
	// canaryReported is set by the canary watcher when it reported a
	// disturbance, which makes every sync reconcile the dataplane until a
	// Reconcile succeeds and clears it: one report per disturbance,
	// however long the repair takes.
	canaryReported atomic.Bool
}

// New validates cfg, applies its defaults and returns a Proxy that is not
// yet running. It registers the metrics on cfg.Registerer.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:          cfg,
		log:          cfg.Logger,
		families:     cfg.families(),
		debt:         map[v1.IPFamily]*conntrackDebt{},
		triggerTimes: map[v1.IPFamily][]time.Time{},
		hcPorts:      map[v1.IPFamily]map[types.NamespacedName]uint16{},
	}
	p.metrics, err = newMetrics(cfg.MetricsNamespace, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p.builder = dataplane.NewBuilder(dataplane.BuilderConfig{
		Families:  p.families,
		NodeName:  cfg.NodeName,
		ProxyName: cfg.ProxyName,
		Settings:  cfg.Settings,
		Logger:    cfg.Logger,
		OnSkip:    p.metrics.skipped,
	})
	for _, d := range cfg.Dataplanes {
		p.planes = append(p.planes, &plane{DataplaneConfig: d})
	}
	for _, f := range p.families {
		p.debt[f] = newConntrackDebt()
	}
	p.handler = &proxyHandler{p: p}
	p.health = health.NewTracker(cfg.Clock, cfg.HealthTimeout, cfg.NodeName)
	if !cfg.DisableHealthCheckNodePorts {
		p.nodePorts = map[v1.IPFamily]*health.NodePorts{}
		for _, f := range p.families {
			p.nodePorts[f] = health.NewNodePorts(health.NodePortsConfig{
				Family:            f,
				NodeName:          cfg.NodeName,
				Addresses:         cfg.HealthCheckAddresses,
				NodePortAddresses: cfg.Settings.NodePortAddresses,
				Healthy:           p.health.Serving,
				Recorder:          cfg.Recorder,
				Logger:            cfg.Logger,
			})
		}
	}
	p.runner = newRunner(runnerConfig{
		clock:    cfg.Clock,
		min:      cfg.MinSyncPeriod,
		period:   cfg.SyncPeriod,
		retry:    cfg.RetryPeriod,
		maxRetry: cfg.MaxRetryPeriod,
		sync:     p.sync,
		next:     p.untilReconcile,
		logger:   cfg.Logger,
	})
	return p, nil
}

// Run starts the sources, waits until every one has synced, then keeps the
// dataplanes programmed until ctx is done; it serves /healthz, /livez and
// /metrics when their bind addresses are set and the health-check node
// ports unless disabled. It returns nil when ctx ends, or the error that
// stopped it: a bind address that cannot be listened on (checked before
// anything starts; retried instead with a Config.BindRetryPeriod) or a
// failed source. A failed sync does not stop Run: it is retried with
// backoff, and the previous rules stay in force.
func (p *Proxy) Run(ctx context.Context) error {
	if p.started.Swap(true) {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	servers, err := p.listen()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers)+len(p.cfg.Sources))
	defer func() {
		cancel()
		for _, s := range servers {
			_ = s.srv.Close()
		}
		for _, np := range p.nodePorts {
			np.Close()
		}
		wg.Wait()
	}()
	for _, s := range servers {
		wg.Go(func() {
			if err := p.serve(ctx, s); err != nil {
				errs <- err
			}
		})
	}

	p.health.Start(p.families...)
	p.logStart()
	synced := p.startSources(ctx, &wg, errs)

	select {
	case <-synced:
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
	p.warnMissingNode()
	p.initialized.Store(true)
	p.log.V(2).Info("Sources synced, starting sync loop")
	p.runner.request()

	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		p.runner.loop(ctx)
	}()
	// Without a dataplane.KernelWatcher there is nothing to poll, and a
	// timer would only wake the proxy.
	if p.cfg.CanaryPeriod > 0 && slices.ContainsFunc(p.planes, func(pl *plane) bool {
		_, ok := pl.Dataplane.(dataplane.KernelWatcher)
		return ok
	}) {
		wg.Go(func() { p.watchKernel(ctx) })
	}
	select {
	case err = <-errs:
	case <-ctx.Done():
	}
	cancel()
	<-loopDone
	return err
}

// RunOnce starts the sources, waits until every one has synced, programs
// every dataplane once (in full) and cleans conntrack, then stops the
// sources and returns. It serves nothing and opens no health-check node
// port. The error is the first failure: a source, or every dataplane or
// cleanup that failed (errors.Join). It suits a node agent's --once.
func (p *Proxy) RunOnce(ctx context.Context) error {
	if p.started.Swap(true) {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(p.cfg.Sources))
	p.logStart()
	synced := p.startSources(ctx, &wg, errs)
	defer wg.Wait()
	defer cancel()
	select {
	case <-synced:
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	p.warnMissingNode()
	p.initialized.Store(true)
	p.once = true
	return p.sync(ctx)
}

// Handler returns a source.Handler that feeds the proxy directly, for
// callers that drive it without (or besides) Sources. Its Synced is a
// no-op.
func (p *Proxy) Handler() source.Handler { return p.handler }

// HealthzHandler serves kube-proxy's /healthz: 200 while no queued change
// has waited more than HealthTimeout for a successful sync and the node is
// eligible (it exists, is not being deleted and is not tainted
// ToBeDeletedByClusterAutoscaler), else 503; the JSON body is kube-proxy's.
func (p *Proxy) HealthzHandler() http.Handler {
	return countCodes(p.health.Healthz(), p.metrics.healthz)
}

// LivezHandler serves kube-proxy's /livez: /healthz without the node
// eligibility check.
func (p *Proxy) LivezHandler() http.Handler {
	return countCodes(p.health.Livez(), p.metrics.livez)
}

// Health returns the proxy's health as /livez reports it.
func (p *Proxy) Health() health.Report { return p.health.Report() }

// Cleanup calls Cleanup on every dataplane, in order, and returns their
// errors joined. It does not need Run and must not run concurrently with
// it.
func (p *Proxy) Cleanup(ctx context.Context) error {
	var errs []error
	for _, pl := range p.planes {
		if err := pl.Dataplane.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", pl.Dataplane.Name(), pl.Family, err))
		}
	}
	return errors.Join(errs...)
}

type namedServer struct {
	name, addr string
	// ln is nil when addr could not be listened on at start and is
	// retried (Config.BindRetryPeriod).
	ln  net.Listener
	srv *http.Server
}

// listen binds the configured HTTP endpoints. A bind failure is an error,
// unless Config.BindRetryPeriod asks for retries (as kube-proxy without
// --bind-address-hard-fail): serve then retries.
func (p *Proxy) listen() ([]namedServer, error) {
	var out []namedServer
	add := func(name, addr string, h http.Handler) error {
		s := namedServer{name: name, addr: addr, srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 10 * time.Second,
			// Scrapers and load balancers that keep connections open
			// and go away must not hold them for ever.
			IdleTimeout: 2 * time.Minute,
		}}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if p.cfg.BindRetryPeriod <= 0 {
				return fmt.Errorf("listening for %s on %s: %w", name, addr, err)
			}
			p.log.Error(err, "Cannot listen yet, retrying", "server", name, "address", addr, "every", p.cfg.BindRetryPeriod)
		}
		s.ln = ln
		out = append(out, s)
		return nil
	}
	closeAll := func() {
		for _, s := range out {
			if s.ln != nil {
				_ = s.ln.Close()
			}
		}
	}
	if a := p.cfg.HealthzBindAddress; a != "" {
		mux := http.NewServeMux()
		mux.Handle("/healthz", p.HealthzHandler())
		mux.Handle("/livez", p.LivezHandler())
		if err := add("healthz", a, mux); err != nil {
			return nil, err
		}
	}
	if a := p.cfg.MetricsBindAddress; a != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(p.cfg.Registerer.(prometheus.Gatherer), promhttp.HandlerOpts{}))
		if err := add("metrics", a, mux); err != nil {
			closeAll()
			return nil, err
		}
	}
	return out, nil
}

// serve serves s until its server is closed, first listening every
// Config.BindRetryPeriod until it can when it could not at start, or
// until ctx ends.
func (p *Proxy) serve(ctx context.Context, s namedServer) error {
	for s.ln == nil {
		t := p.cfg.Clock.NewTimer(p.cfg.BindRetryPeriod)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			p.log.Error(err, "Cannot listen yet, retrying", "server", s.name, "address", s.addr, "every", p.cfg.BindRetryPeriod)
			continue
		}
		p.log.Info("Listening", "server", s.name, "address", s.addr)
		s.ln = ln
	}
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving %s: %w", s.name, err)
	}
	return nil
}

// startSources runs every source in its own goroutine (tracked by wg); the
// returned channel closes once all have synced. A source that returns
// early without error counts as synced: it delivered all it will.
func (p *Proxy) startSources(ctx context.Context, wg *sync.WaitGroup, errs chan<- error) <-chan struct{} {
	all := make(chan struct{})
	var pending sync.WaitGroup
	for _, src := range p.cfg.Sources {
		h := &sourceHandler{proxyHandler: p.handler, done: pending.Done}
		pending.Add(1)
		wg.Go(func() {
			err := src.Run(ctx, h)
			if err != nil && ctx.Err() == nil {
				// Reported before (and instead of) counting as synced,
				// so that a waiter never mistakes a failed source for
				// one that delivered everything.
				errs <- fmt.Errorf("%s: %w", describe(src), err)
				return
			}
			h.Synced()
		})
	}
	go func() {
		pending.Wait()
		close(all)
	}()
	return all
}

// describe names a source in logs and errors: in its own words when it
// implements fmt.Stringer (the sources of this module do), else by its type.
func describe(s source.Source) string {
	if d, ok := s.(fmt.Stringer); ok {
		return logtext.String(d.String())
	}
	return fmt.Sprintf("%T", s)
}

// logStart tells an operator, at default verbosity, what the proxy is
// about to do, with the settings that are most often wrong.
func (p *Proxy) logStart() {
	planes := make([]string, len(p.planes))
	for i, pl := range p.planes {
		planes[i] = fmt.Sprintf("%s (%s)", pl.Dataplane.Name(), pl.Family)
	}
	sources := make([]string, len(p.cfg.Sources))
	for i, s := range p.cfg.Sources {
		sources[i] = describe(s)
	}
	set := p.cfg.Settings
	kv := []any{"node", logtext.String(p.cfg.NodeName), "ipFamilies", p.families,
		"dataplanes", planes, "sources", sources}
	switch set.LocalDetector.Mode {
	case dataplane.LocalModeClusterCIDR:
		kv = append(kv, "clusterCIDRs", prefixStrings(set.LocalDetector.CIDRs))
	case "":
		kv = append(kv, "clusterCIDRs", []string{})
	default:
		kv = append(kv, "localTrafficDetection", set.LocalDetector.Mode)
	}
	npa := prefixStrings(set.NodePortAddresses)
	if set.NodePortPrimary {
		npa = append(npa, "primary")
	}
	if len(npa) == 0 {
		npa = []string{"all"}
	}
	kv = append(kv, "nodePortAddresses", npa)
	if set.MasqueradeAll {
		kv = append(kv, "masqueradeAll", true)
	}
	p.log.Info("Starting proxy", kv...)
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// warnMissingNode warns, once the sources have synced, when none of them
// delivered this proxy's Node: a misspelt node name or a source that
// cannot see Nodes. Without it /healthz answers 503 and endpoints carry no
// zone to route by. A proxy fed only through Handler has no source to
// blame and is not warned.
func (p *Proxy) warnMissingNode() {
	if p.cfg.NodeName == "" || len(p.cfg.Sources) == 0 || p.nodeSeen.Load() {
		return
	}
	p.log.Info("Sources synced without this proxy's Node: /healthz answers 503 and topology is unknown until it appears; check the node name",
		"node", logtext.String(p.cfg.NodeName))
}

// proxyHandler feeds the Builder and asks for a sync when a change is due.
type proxyHandler struct {
	p *Proxy
}

func (h *proxyHandler) OnService(old, new *v1.Service) {
	h.p.changed("Service", h.p.builder.UpdateService(old, new))
}

func (h *proxyHandler) OnEndpointSlice(old, new *discovery.EndpointSlice) {
	h.p.changed("EndpointSlice", h.p.builder.UpdateEndpointSlice(old, new))
}

func (h *proxyHandler) OnNode(old, new *v1.Node) {
	p := h.p
	n := new
	if n == nil {
		n = old
	}
	if n == nil || n.Name != p.cfg.NodeName {
		return
	}
	p.nodeSeen.Store(new != nil)
	p.health.SetNode(new)
	p.changed("Node", p.builder.UpdateNode(new))
}

func (h *proxyHandler) OnServiceCIDR(old, new *networking.ServiceCIDR) {
	h.p.changed("ServiceCIDR", h.p.builder.UpdateServiceCIDR(old, new))
}

func (h *proxyHandler) Synced() {}

// sourceHandler is the Handler one source gets: it reports that source's
// Synced once.
type sourceHandler struct {
	*proxyHandler
	once sync.Once
	done func()
}

func (h *sourceHandler) Synced() { h.once.Do(h.done) }

// changed counts an object update and, once the sources have synced,
// requests a sync if the Builder said one is due (kube-proxy gates the
// same way: the initial sync is requested when the last source syncs).
func (p *Proxy) changed(kind string, due bool) {
	p.metrics.change(kind, due)
	if !due || !p.initialized.Load() {
		return
	}
	p.health.Queued(p.families...)
	p.metrics.lastQueued.Set(float64(p.cfg.Clock.Now().UnixNano()) / 1e9)
	p.runner.request()
}

// watchKernel polls every dataplane.KernelWatcher each CanaryPeriod until
// ctx ends. A disturbed canary fails /healthz, naming the dataplane, until
// a reconcile repairs it (health.Tracker.Drifted), is counted once, and
// asks for a sync that reconciles.
//
// A check is one netlink read while nobody changed the rules, but a read
// of every rule the dataplane owns when someone else did (any program's
// change moves the generation the canaries follow): the wait after a poll
// is at least nine times what the poll took, so that a node where
// another program writes rules every second spends at most a tenth of a
// core on it, noticing drift later instead.
func (p *Proxy) watchKernel(ctx context.Context) {
	wait := p.cfg.CanaryPeriod
	for {
		t := p.cfg.Clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		start := p.cfg.Clock.Now()
		p.pollKernel(ctx)
		wait = canaryWait(p.cfg.CanaryPeriod, p.cfg.Clock.Since(start))
	}
}

// canaryWait is the wait after a canary poll that took took: the period,
// or nine times what the poll took when that is longer.
func canaryWait(period, took time.Duration) time.Duration {
	return max(period, 9*took)
}

// pollKernel asks every dataplane.KernelWatcher once.
func (p *Proxy) pollKernel(ctx context.Context) {
	for _, pl := range p.planes {
		w, ok := pl.Dataplane.(dataplane.KernelWatcher)
		if !ok {
			continue
		}
		changed, err := w.KernelChanged(ctx)
		if err != nil {
			p.log.V(2).Info("Cannot check the kernel for changes", "dataplane", pl.Dataplane.Name(), "ipFamily", pl.Family, "err", err)
			continue
		}
		if !changed || pl.canaryReported.Swap(true) {
			continue
		}
		p.metrics.kernelChanges.WithLabelValues(string(pl.Family), pl.Dataplane.Name()).Inc()
		p.log.Info("Rules changed by someone else; reconciling", "dataplane", pl.Dataplane.Name(), "ipFamily", pl.Family)
		// canaryReported, set above, is what makes the next sync
		// reconcile; set before the drift is recorded, a sync that
		// misses it started after, so cannot clear the drift from
		// /healthz.
		p.health.Drifted(pl.Family, pl.Dataplane.Name())
		p.runner.request()
	}
}
