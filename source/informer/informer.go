package informer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/validation"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	discoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	networkingv1 "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/cache"
)

// labelServiceProxyName is servicemodel.LabelServiceProxyName, spelled out
// so that a source depends on nothing downstream of it.
const labelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Client is the part of a clientset the source reads through: its core/v1
// and discovery/v1 typed clients (of which it uses Services, Nodes and
// EndpointSlices). *kubernetes.Clientset and client-go's fake clientset
// implement it; the source needs neither kubernetes.Interface nor client-go's
// informer factories.
type Client interface {
	CoreV1() corev1.CoreV1Interface
	DiscoveryV1() discoveryv1.DiscoveryV1Interface
}

// networkingClient is a Client that also serves ServiceCIDRs, as every
// kubernetes.Interface does.
type networkingClient interface {
	NetworkingV1() networkingv1.NetworkingV1Interface
}

// Config configures a Source. The zero value watches the services no other
// proxy claims and no Node.
type Config struct {
	// NodeName is the Node to watch (by a metadata.name field selector);
	// "" watches none. Set it to the proxy's NodeName.
	NodeName string
	// ProxyName selects services labelled
	// service.kubernetes.io/service-proxy-name=ProxyName in addition to the
	// unlabelled ones; "" selects the unlabelled ones only, as kube-proxy
	// does. Set it to the proxy's ProxyName.
	ProxyName string
	// ResyncPeriod is the informers' resync period. Zero means none:
	// resyncs re-deliver unchanged objects, which the trackers ignore
	// anyway (kube-proxy's --config-sync-period defaults to 15m).
	ResyncPeriod time.Duration
	// RetryMax is the longest the source waits between two attempts to
	// reach an API server it lost (unreachable, or answering 429, 500, 503
	// or 504). Zero means 2s: a change made after a restarted API server is
	// ready arrives within about that, where client-go's own backoff can wait
	// a minute; each informer (three or four) makes one attempt per interval
	// while the server is away.
	RetryMax time.Duration
	// Logger is where the source logs; the zero value discards.
	Logger logr.Logger
	// Registerer receives the source's metric,
	// <MetricsNamespace>_source_objects_refused_total{source="informers",
	// kind} (see the package documentation); nil registers none.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metric name; "" means "proxykit".
	MetricsNamespace string
}

// Source watches a cluster through client-go informers, filtered on the
// server as kube-proxy filters them: Services without a foreign
// service-proxy-name label and with a cluster IP (spec.clusterIP!=None),
// EndpointSlices not labelled headless, and this Node. managedFields are
// dropped from every object to save memory, and deletion tombstones are
// unwrapped.
type Source struct {
	client Client
	cfg    Config
}

// New returns a source watching client.
func New(client Client, cfg Config) *Source {
	return &Source{client: client, cfg: cfg}
}

// String implements fmt.Stringer.
func (s *Source) String() string { return sourceName }

// sourceName names the source in its logs.
const sourceName = "informers"

// Run starts the informers, calls h.Synced once every informer has
// delivered its initial list, and returns nil when ctx is done (after the
// informers stopped).
func (s *Source) Run(ctx context.Context, h source.Handler) error {
	var (
		wg     sync.WaitGroup
		synced []cache.InformerSynced
	)
	checker, err := validation.NewChecker(validation.Config{
		Source: sourceName, Mode: validation.Stored, Logger: s.cfg.Logger,
		Registerer: s.cfg.Registerer, MetricsNamespace: s.cfg.MetricsNamespace,
	})
	if err != nil {
		return err
	}
	checks := newChecked(h, checker)
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGuard(s.cfg.Logger, s.cfg.RetryMax)
	start := func(what string, lw *cache.ListWatch, example runtime.Object, eh cache.ResourceEventHandler) error {
		// The client says whether it supports watch-list (the fake
		// clientset does not), as client-go's generated informers ask.
		inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, s.client), example, cache.SharedIndexInformerOptions{ResyncPeriod: s.cfg.ResyncPeriod})
		if err := inf.SetTransform(dropManagedFields); err != nil {
			return fmt.Errorf("%s informer: %w", what, err)
		}
		// The guard reports refusals once; client-go's default handler
		// would log every failure through klog.
		if err := inf.SetWatchErrorHandlerWithContext(s.watchError(what)); err != nil {
			return fmt.Errorf("%s informer: %w", what, err)
		}
		reg, err := inf.AddEventHandlerWithResyncPeriod(eh, s.cfg.ResyncPeriod)
		if err != nil {
			return fmt.Errorf("%s informer: %w", what, err)
		}
		synced = append(synced, reg.HasSynced)
		wg.Go(func() { inf.RunWithContext(ctx) })
		return nil
	}

	// A selector cannot say "unlabelled or labelled ProxyName", so a named
	// proxy runs two service informers and merges them.
	selectors := []labels.Selector{mustSelector(labelServiceProxyName, selection.DoesNotExist)}
	if s.cfg.ProxyName != "" {
		selectors = append(selectors, mustSelector(labelServiceProxyName, selection.Equals, s.cfg.ProxyName))
	}
	merge := newServiceMerger(checks)
	services := s.client.CoreV1().Services(metav1.NamespaceAll)
	for i, sel := range selectors {
		lw := listWatch(g, "services", services.List, services.Watch, func(o *metav1.ListOptions) {
			o.LabelSelector = sel.String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
		})
		if err := start("services", lw, &v1.Service{}, merge.handler(i, s.cfg.Logger)); err != nil {
			return err
		}
	}

	slices := s.client.DiscoveryV1().EndpointSlices(metav1.NamespaceAll)
	lw := listWatch(g, "endpointslices.discovery.k8s.io", slices.List, slices.Watch, func(o *metav1.ListOptions) {
		o.LabelSelector = mustSelector(v1.IsHeadlessService, selection.DoesNotExist).String()
	})
	if err := start("endpointslices", lw, &discovery.EndpointSlice{}, typedHandler(s.cfg.Logger, checks.OnEndpointSlice)); err != nil {
		return err
	}

	if s.cfg.NodeName != "" {
		nodes := s.client.CoreV1().Nodes()
		lw := listWatch(g, "nodes", nodes.List, nodes.Watch, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.cfg.NodeName).String()
		})
		if err := start("node", lw, &v1.Node{}, typedHandler(s.cfg.Logger, checks.OnNode)); err != nil {
			return err
		}
	}

	// ServiceCIDRs are optional: the handler may not want them and the
	// client may not serve them, and the proxy never waits for them.
	ch, wants := h.(source.ServiceCIDRHandler)
	nc, serves := s.client.(networkingClient)
	if wants && serves {
		cidrs := nc.NetworkingV1().ServiceCIDRs()
		lw := listWatch(g, "servicecidrs.networking.k8s.io", cidrs.List, cidrs.Watch, func(*metav1.ListOptions) {})
		essential := synced
		if err := start("servicecidrs", lw, &networking.ServiceCIDR{}, typedHandler(s.cfg.Logger, checks.serviceCIDRs(ch))); err != nil {
			return err
		}
		synced = essential
	}

	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		h.Synced()
	}
	<-ctx.Done()
	return nil
}

// listWatch lists and watches resource through one typed client, with
// tweak applied to the options of both, each call through the guard.
func listWatch[L runtime.Object](
	g *guard, resource string,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	tweak func(*metav1.ListOptions),
) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return call(ctx, g, "list", resource, func() (runtime.Object, error) { return list(ctx, o) })
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return call(ctx, g, "watch", resource, func() (watch.Interface, error) { return watchFn(ctx, o) })
		},
	}
}

// watchError is the informers' watch error handler: refusals were
// reported by the guard, the rest (expired resource versions, closed
// watches) is routine and logged at V(2).
func (s *Source) watchError(what string) cache.WatchErrorHandlerWithContext {
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return
		}
		s.cfg.Logger.V(2).Info("Informer's list or watch ended; it relists", "source", sourceName, "informer", what, "err", err.Error())
	}
}

func mustSelector(key string, op selection.Operator, values ...string) labels.Selector {
	r, err := labels.NewRequirement(key, op, values)
	if err != nil {
		// Only reachable with an invalid ProxyName, which the API server
		// would reject as a label value anyway: select nothing.
		return labels.Nothing()
	}
	return labels.NewSelector().Add(*r)
}

// dropManagedFields is the informers' transform: managedFields are large
// and no proxy reads them.
func dropManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// typedHandler adapts an (old, new) callback of one object type to an
// informer handler, unwrapping tombstones.
func typedHandler[T any](log logr.Logger, fn func(old, new *T)) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := asType[T](log, obj); ok {
				fn(nil, o)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := asType[T](log, oldObj)
			n, ok2 := asType[T](log, newObj)
			if ok1 && ok2 {
				fn(o, n)
			}
		},
		DeleteFunc: func(obj any) {
			if o, ok := asType[T](log, obj); ok {
				fn(o, nil)
			}
		},
	}
}

func asType[T any](log logr.Logger, obj any) (*T, bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	o, ok := obj.(*T)
	if !ok {
		log.Error(nil, "Unexpected object type from informer", "type", fmt.Sprintf("%T", obj))
	}
	return o, ok
}

// serviceMerger joins several service informers whose selectors are
// disjoint into one stream. When a relabel moves a service between them,
// the two informers' add and delete may arrive in either order; the merger
// keeps each informer's copy and forwards the most recent surviving one, so
// a late delete from the old informer does not remove the service.
type serviceMerger struct {
	h  source.Handler
	mu sync.Mutex
	// copies holds, per service, each informer's copy; forwarded is what
	// the handler was last given.
	copies    map[types.NamespacedName]map[int]*v1.Service
	forwarded map[types.NamespacedName]*v1.Service
}

func newServiceMerger(h source.Handler) *serviceMerger {
	return &serviceMerger{
		h:         h,
		copies:    map[types.NamespacedName]map[int]*v1.Service{},
		forwarded: map[types.NamespacedName]*v1.Service{},
	}
}

func (m *serviceMerger) handler(i int, log logr.Logger) cache.ResourceEventHandler {
	return typedHandler(log, func(old, new *v1.Service) { m.apply(i, old, new) })
}

// apply records informer i's change and forwards the resulting change of
// the merged view. The lock is held while forwarding so that changes of one
// service reach the handler in the order they were merged; the handler
// never blocks.
func (m *serviceMerger) apply(i int, old, new *v1.Service) {
	obj := new
	if obj == nil {
		obj = old
	}
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	m.mu.Lock()
	defer m.mu.Unlock()
	copies := m.copies[key]
	if copies == nil {
		copies = map[int]*v1.Service{}
		m.copies[key] = copies
	}
	cur := new
	if new != nil {
		copies[i] = new
	} else {
		delete(copies, i)
		// Another informer still has it: the service moved there.
		best := -1
		for j, c := range copies {
			if best < 0 || j < best {
				best, cur = j, c
			}
		}
	}
	if len(copies) == 0 {
		delete(m.copies, key)
	}
	prev := m.forwarded[key]
	if cur == nil {
		delete(m.forwarded, key)
	} else {
		m.forwarded[key] = cur
	}
	if prev != nil || cur != nil {
		m.h.OnService(prev, cur)
	}
}
