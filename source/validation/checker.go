package validation

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/internal/logtext"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultMetricsNamespace is the metric name prefix a Config's ""
// MetricsNamespace means.
const DefaultMetricsNamespace = "proxykit"

// Config configures a Checker. The zero value checks as Create, logs
// nowhere and registers no metric.
type Config struct {
	// Source names the source in log lines and in the metric's source
	// label ("manifests", "informers").
	Source string
	// Mode is how objects are checked.
	Mode Mode
	// Logger is where refusals are logged, at the default level; the zero
	// value discards.
	Logger logr.Logger
	// Registerer receives the metric
	// <MetricsNamespace>_source_objects_refused_total{source, kind}; nil
	// registers none. Several Checkers may share one: the first one's
	// counter is shared, its series told apart by their labels.
	Registerer prometheus.Registerer
	// MetricsNamespace prefixes the metric name; "" means
	// DefaultMetricsNamespace.
	MetricsNamespace string
}

// Checker checks the objects a source is about to hand on, and logs and
// counts those it refuses.
type Checker struct {
	source  string
	mode    Mode
	log     logr.Logger
	refused *prometheus.CounterVec
}

// NewChecker returns a Checker for cfg. It fails only if cfg.Registerer
// refuses the metric (another collector of the same name and other
// labels).
func NewChecker(cfg Config) (*Checker, error) {
	ns := cfg.MetricsNamespace
	if ns == "" {
		ns = DefaultMetricsNamespace
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "source_objects_refused_total",
		Help: "Objects a source refused to hand on because the API server would refuse them (each logged with its field errors), by source and kind.",
	}, []string{"source", "kind"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(refused); err != nil {
			are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err)
			if !ok {
				return nil, fmt.Errorf("%s: register metrics: %w", cfg.Source, err)
			}
			if refused, ok = are.ExistingCollector.(*prometheus.CounterVec); !ok {
				return nil, fmt.Errorf("%s: register metrics: %w", cfg.Source, err)
			}
		}
	}
	// Every kind's series exists from the start, so that a rate over
	// it is defined before the first refusal.
	for _, k := range []string{kindService.Kind, kindEndpointSlice.Kind, kindNode.Kind, kindServiceCIDR.Kind} {
		refused.WithLabelValues(cfg.Source, k)
	}
	return &Checker{source: cfg.Source, mode: cfg.Mode, log: cfg.Logger, refused: refused}, nil
}

// Check returns Validate(obj, mode). When obj is refused it also logs the
// API server's error with the object's kind, namespace and name, and
// keysAndValues (a file's path and line, say), and counts the refusal.
func (c *Checker) Check(obj runtime.Object, keysAndValues ...any) error {
	gk, err := check(obj, c.mode)
	if err == nil {
		return nil
	}
	kind := gk.Kind
	c.refused.WithLabelValues(c.source, kind).Inc()
	kv := []any{"source", c.source, "kind", kind}
	if a, aerr := meta.Accessor(obj); aerr == nil {
		kv = append(kv, "object", logtext.KObj(a))
	}
	c.log.Error(logtext.Error(err), "Refusing an object the API server would refuse", append(kv, keysAndValues...)...)
	return err
}
