// Command embed is the shape of an agent that already runs client-go
// informers of its own, as Antrea's and Calico's agents do, and adds a
// service proxy to them with proxykit's lower-level API instead of
// proxykit.New: its informer handlers feed a dataplane.Builder (which holds
// one servicemodel.Tracker and one endpoints.Tracker per IP family), and
// each Build's State goes to two dataplanes at once, iptables and the table
// of examples/customdataplane, served over HTTP.
//
//	embed --kubeconfig ~/.kube/config --hostname-override "$(hostname)"
//	embed --kubeconfig ~/.kube/config --dry-run     # iptables through its fake: no root, the kernel untouched
//	curl http://127.0.0.1:10280/table               # the custom dataplane's table
//
// What proxykit.New adds on top, which this program leaves out: a
// bounded-frequency sync loop, periodic reconciles of what others change
// in the kernel, conntrack cleanup of stale UDP flows, /healthz and
// metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/examples/customdataplane"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to a kubeconfig file; in-cluster configuration when empty")
	nodeName := flag.String("hostname-override", "", "this node's name (default: the host name)")
	dryRun := flag.Bool("dry-run", false, "program iptables' fake instead of the kernel")
	tableAddr := flag.String("table-address", "127.0.0.1:10280", "where to serve the custom dataplane's table at /table; empty: nowhere")
	flag.Parse()

	log := logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*kubeconfig, *nodeName, *dryRun, *tableAddr, log); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName string, dryRun bool, tableAddr string, log logr.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if nodeName == "" {
		var err error
		if nodeName, err = os.Hostname(); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig %q: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var runner xtables.Runner = xtables.NewFakeRunner()
	if !dryRun {
		if runner, err = xtables.NewExecRunner(xtables.ExecConfig{}); err != nil {
			return err
		}
	}
	a, err := newAgent(nodeName, runner, log)
	if err != nil {
		return err
	}
	if tableAddr != "" {
		ln, err := net.Listen("tcp", tableAddr)
		if err != nil {
			return fmt.Errorf("--table-address %s: %w", tableAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/table", a.table)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	return a.serve(ctx, client)
}

// agent is the service-proxy part of the agent: a Builder its informers
// feed and the dataplanes its States go to.
type agent struct {
	builder *dataplane.Builder
	table   *customdataplane.Dataplane
	planes  []dataplane.Dataplane
	// due has a token when a Build is due.
	due chan struct{}
	log logr.Logger
}

func newAgent(nodeName string, runner xtables.Runner, log logr.Logger) (*agent, error) {
	ipt, err := iptables.New(iptables.Config{Runner: runner, Logger: log})
	if err != nil {
		return nil, err
	}
	table := customdataplane.New()
	return &agent{
		builder: dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: nodeName, Logger: log}),
		table:   table,
		planes:  []dataplane.Dataplane{ipt, table},
		due:     make(chan struct{}, 1),
		log:     log,
	}, nil
}

// serve runs the informers, waits for their caches, then syncs the
// dataplanes whenever the objects change, until ctx is done. The
// dataplanes are synced from the calling goroutine.
func (a *agent) serve(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	a.register(factory)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache of %v not synced: %w", typ, context.Cause(ctx))
		}
	}
	a.signal(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.due:
		}
		if err := a.sync(ctx); err != nil && ctx.Err() == nil {
			// A failed dataplane programs everything on its next Sync.
			a.log.Error(err, "Sync failed, retrying in a second")
			time.AfterFunc(time.Second, func() { a.signal(true) })
		}
	}
}

// register adds the proxy's handlers to the agent's informers. A real
// agent filters as source/informer does (no headless services, no
// service-proxy-name label); the Builder skips what it cannot serve.
func (a *agent) register(f informers.SharedInformerFactory) {
	f.Core().V1().Services().Informer().AddEventHandler(handler(a.builder.UpdateService, a.signal))
	f.Discovery().V1().EndpointSlices().Informer().AddEventHandler(handler(a.builder.UpdateEndpointSlice, a.signal))
	f.Core().V1().Nodes().Informer().AddEventHandler(handler(func(_, n *v1.Node) bool { return a.builder.UpdateNode(n) }, a.signal))
}

// handler turns an informer's callbacks into update(old, new) calls, nil
// old for an add and nil new for a delete, and calls due with what update
// reports.
func handler[T any](update func(old, new *T) bool, due func(bool)) cache.ResourceEventHandlerFuncs {
	obj := func(o any) *T {
		if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = t.Obj
		}
		t, _ := o.(*T)
		return t
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { due(update(nil, obj(o))) },
		UpdateFunc: func(o, n any) { due(update(obj(o), obj(n))) },
		DeleteFunc: func(o any) {
			if t := obj(o); t != nil {
				due(update(t, nil))
			}
		},
	}
}

func (a *agent) signal(due bool) {
	if due {
		select {
		case a.due <- struct{}{}:
		default:
		}
	}
}

// sync builds the States of what changed and gives each to every
// dataplane: each diffs it against what it last programmed.
func (a *agent) sync(ctx context.Context) error {
	var errs []error
	for _, st := range a.builder.Build().States {
		for _, p := range a.planes {
			if err := p.Sync(ctx, st); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}
