package proxykit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Labels kube-proxy filters on.
const (
	// LabelServiceProxyName names the proxy that handles a service;
	// proxies leave services labelled with another name alone.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the EndpointSlices of headless services, which
	// no proxy programs.
	LabelHeadless = "service.kubernetes.io/headless"
)

// InformerConfig configures an InformerSource. The zero value watches the
// services no other proxy claims and no Node.
type InformerConfig struct {
	// NodeName is the Node to watch (by a metadata.name field selector);
	// "" watches none. Set it to the Proxy's NodeName.
	NodeName string
	// ProxyName selects services labelled
	// service.kubernetes.io/service-proxy-name=ProxyName in addition to the
	// unlabelled ones; "" selects the unlabelled ones only, as kube-proxy
	// does. Set it to the Proxy's ProxyName.
	ProxyName string
	// ResyncPeriod is the informers' resync period. Zero means none:
	// resyncs re-deliver unchanged objects, which the trackers ignore
	// anyway (kube-proxy's --config-sync-period defaults to 15m).
	ResyncPeriod time.Duration
	// Logger is where the source logs; the zero value is klog.Background().
	Logger logr.Logger
}

// InformerSource watches a cluster through client-go informers, filtered on
// the server as kube-proxy filters them: Services without a foreign
// service-proxy-name label and with a cluster IP (spec.clusterIP!=None),
// EndpointSlices not labelled headless, and this Node. managedFields are
// dropped from every object to save memory, and deletion tombstones are
// unwrapped.
type InformerSource struct {
	client kubernetes.Interface
	cfg    InformerConfig
}

// NewInformerSource returns a source watching client.
func NewInformerSource(client kubernetes.Interface, cfg InformerConfig) *InformerSource {
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = klog.Background()
	}
	return &InformerSource{client: client, cfg: cfg}
}

// Run starts the informers, calls h.Synced once every informer has
// delivered its initial list, and returns nil when ctx is done (after the
// informers stopped).
func (s *InformerSource) Run(ctx context.Context, h Handler) error {
	var regs []cache.ResourceEventHandlerRegistration
	var factories []informers.SharedInformerFactory
	newFactory := func(tweak func(*metav1.ListOptions)) informers.SharedInformerFactory {
		opts := []informers.SharedInformerOption{informers.WithTransform(dropManagedFields)}
		if tweak != nil {
			opts = append(opts, informers.WithTweakListOptions(tweak))
		}
		f := informers.NewSharedInformerFactoryWithOptions(s.client, s.cfg.ResyncPeriod, opts...)
		factories = append(factories, f)
		return f
	}
	register := func(inf cache.SharedIndexInformer, eh cache.ResourceEventHandler) error {
		reg, err := inf.AddEventHandlerWithResyncPeriod(eh, s.cfg.ResyncPeriod)
		if err != nil {
			return err
		}
		regs = append(regs, reg)
		return nil
	}

	// A selector cannot say "unlabelled or labelled ProxyName", so a named
	// proxy runs two service informers and merges them.
	selectors := []labels.Selector{mustSelector(LabelServiceProxyName, selection.DoesNotExist)}
	if s.cfg.ProxyName != "" {
		selectors = append(selectors, mustSelector(LabelServiceProxyName, selection.Equals, s.cfg.ProxyName))
	}
	merge := newServiceMerger(h)
	for i, sel := range selectors {
		f := newFactory(func(o *metav1.ListOptions) {
			o.LabelSelector = sel.String()
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.clusterIP", v1.ClusterIPNone).String()
		})
		if err := register(f.Core().V1().Services().Informer(), merge.handler(i, s.cfg.Logger)); err != nil {
			return fmt.Errorf("services informer: %w", err)
		}
	}

	slices := newFactory(func(o *metav1.ListOptions) {
		o.LabelSelector = mustSelector(LabelHeadless, selection.DoesNotExist).String()
	})
	if err := register(slices.Discovery().V1().EndpointSlices().Informer(), typedHandler(s.cfg.Logger, h.OnEndpointSlice)); err != nil {
		return fmt.Errorf("endpointslices informer: %w", err)
	}

	if s.cfg.NodeName != "" {
		nodes := newFactory(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.cfg.NodeName).String()
		})
		if err := register(nodes.Core().V1().Nodes().Informer(), typedHandler(s.cfg.Logger, h.OnNode)); err != nil {
			return fmt.Errorf("node informer: %w", err)
		}
	}

	for _, f := range factories {
		f.Start(ctx.Done())
	}
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	synced := make([]cache.InformerSynced, len(regs))
	for i, r := range regs {
		synced[i] = r.HasSynced
	}
	if cache.WaitForCacheSync(ctx.Done(), synced...) {
		h.Synced()
	}
	<-ctx.Done()
	return nil
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
	h  Handler
	mu sync.Mutex
	// copies holds, per service, each informer's copy; forwarded is what
	// the handler was last given.
	copies    map[types.NamespacedName]map[int]*v1.Service
	forwarded map[types.NamespacedName]*v1.Service
}

func newServiceMerger(h Handler) *serviceMerger {
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
