package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/examples/nodeagent/internal/kpconfig"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2/textlogger"
)

// gatherer is what /metrics serves: the proxy's proxykit_* metrics and,
// unless --kube-proxy-metrics=false, the same under kube-proxy's names.
func (o *options) gatherer(reg *prometheus.Registry, planes []plane) prometheus.Gatherer {
	if !o.kubeProxyMetrics {
		return reg
	}
	var families []string
	for _, pl := range planes {
		if f := string(pl.family); len(families) == 0 || families[len(families)-1] != f {
			families = append(families, f)
		}
	}
	return prometheus.Gatherers{reg, &kubeProxyView{from: reg, ns: proxykit.DefaultMetricsNamespace, families: families}}
}

// metricsHandler serves what kube-proxy's metrics server serves: /metrics,
// /healthz (the server answering, "ok"), /proxyMode, /configz, and with
// enableProfiling /debug/pprof; and /livez and /proxykit/states, the
// agent's own.
func (o *options) metricsHandler(p *proxykit.Proxy, g prometheus.Gatherer, planes []plane) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(statesPath, o.statesHandler(planes))
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	ok := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, "[+]ping ok\nhealthz check passed\n")
			return
		}
		fmt.Fprint(w, "ok")
	}
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/healthz/ping", ok)
	mux.Handle("/livez", p.LivezHandler())
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, o.proxyMode)
	})
	mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"kubeproxy.config.k8s.io": o.cfg})
	})
	if o.cfg.EnableProfiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// bindRetryPeriod is how often a server whose port is taken tries again
// without --bind-address-hard-fail: kube-proxy's period.
const bindRetryPeriod = 5 * time.Second

// serve serves h on addr until stop. A port that cannot be listened on
// is an error now with hardFail (--bind-address-hard-fail); without it, as
// kube-proxy does, the failure is logged and the listen retried every
// bindRetryPeriod until it succeeds or stop.
func serve(addr string, h http.Handler, hardFail bool, log logr.Logger) (stop func(), _ error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if hardFail {
			return nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
		}
		log.Error(err, "Cannot listen for metrics yet, retrying", "address", addr, "every", bindRetryPeriod)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ln == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(bindRetryPeriod):
			}
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				log.Error(err, "Cannot listen for metrics yet, retrying", "address", addr, "every", bindRetryPeriod)
			}
		}
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "Serving metrics failed", "address", addr)
		}
	}()
	return func() {
		cancel()
		_ = srv.Close()
		<-done
	}, nil
}

// logger is the agent's logger in --logging-format: klog's text format, or
// JSON lines through logr's funcr.
func (o *options) logger(w io.Writer) logr.Logger {
	if o.cfg.Logging.Format == "json" {
		return funcr.NewJSON(func(obj string) { fmt.Fprintln(w, obj) }, funcr.Options{
			LogCaller: funcr.All, LogTimestamp: true, Verbosity: o.verbosity,
		})
	}
	cfg := textlogger.NewConfig(textlogger.Verbosity(o.verbosity), textlogger.Output(w))
	if vm := logsapi.VModuleConfigurationPflag(&o.cfg.Logging.VModule).String(); vm != "" {
		_ = cfg.VModule().Set(vm)
	}
	return textlogger.NewLogger(cfg)
}

// writeConfig writes the effective configuration for --write-config-to.
func (o *options) writeConfig() error {
	codecs, err := kpconfig.NewCodecs()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := codecs.Encode(o.cfg, &b); err != nil {
		return err
	}
	return replaceFile(o.writeConfigTo, b.Bytes())
}

// replaceFile makes path a new file of mode 0600 holding data: written
// beside it under another name, then renamed over it. A symlink planted at
// path is replaced, never followed (kube-proxy's os.Create would truncate
// whatever it points at, as root), and a reader sees the old file or the
// new one, never half of one. The mode is the owner's alone: the
// configuration names the kubeconfig and the node's settings.
func replaceFile(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// version is the agent's module version, for --version.
func version() string {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	return "nodeagent (proxykit) " + v
}

// errConfigChanged ends the agent when its --config file changes, as it
// ends kube-proxy: the restarted process reads the new file.
var errConfigChanged = errors.New("the file changed; exiting so that it is read again, as kube-proxy does")

// watchConfig calls stop with an error naming path when path is written,
// replaced or removed.
func watchConfig(path string, stop context.CancelCauseFunc) (func(), error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	if err := w.Add(path); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
					stop(fmt.Errorf("--config %s: %w", path, errConfigChanged))
					return
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				stop(fmt.Errorf("--config %s: watching: %w", path, err))
				return
			}
		}
	}()
	return func() {
		_ = w.Close()
		<-done
	}, nil
}
