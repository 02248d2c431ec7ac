package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/informer"
	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
)

// input is where the objects come from, and what goes with it.
type input struct {
	source.Source
	// what describes the source as the command line chose it, for the
	// proxy's start-up line and errors.
	what string
	// nodeName is this node's name.
	nodeName string
	// demo is set for the bundled demo manifests, which never change.
	demo bool
	// noSource is set when the demo was taken because the command line
	// named no source (nor --demo): the proxy then only prints its rules.
	noSource bool
	recorder proxykit.EventRecorder
	// reg is the registry /metrics serves; the source counts what it
	// refuses on it, so it is made with the source, before the proxy.
	reg   *prometheus.Registry
	close func()
}

// String implements fmt.Stringer.
func (s *input) String() string { return s.what }

func (o *options) openSource(ctx context.Context, log logr.Logger) (*input, error) {
	s := &input{nodeName: o.cfg.HostnameOverride, reg: prometheus.NewRegistry(), close: func() {}}
	var cfg *rest.Config
	var err error
	switch {
	case o.demo:
		if err := s.useDemo(); err != nil {
			return nil, err
		}
	case o.manifests != "":
		// Checked here so that the error names the flag; the source
		// reports later failures itself.
		if _, err := os.Stat(o.manifests); err != nil {
			if pe, ok := errors.AsType[*fs.PathError](err); ok {
				err = pe.Err
			}
			return nil, fmt.Errorf("--manifests %s: %w", o.manifests, err)
		}
		s.Source = manifest.New(o.manifests, manifest.Config{Logger: log, Registerer: s.reg})
		s.what = "manifests " + o.manifests
	case o.cfg.ClientConnection.Kubeconfig != "" || o.master != "":
		kubeconfig := o.cfg.ClientConnection.Kubeconfig
		if cfg, err = clientcmd.BuildConfigFromFlags(o.master, kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		s.what = "cluster via " + kubeconfig
		if kubeconfig == "" {
			s.what = "cluster via " + o.master
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
		s.what = "cluster via in-cluster config"
	default:
		if err := s.useDemo(); err != nil {
			return nil, err
		}
		s.noSource = true
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
		cc := o.cfg.ClientConnection
		cfg.AcceptContentTypes, cfg.ContentType = cc.AcceptContentTypes, cc.ContentType
		cfg.QPS, cfg.Burst = cc.QPS, int(cc.Burst)
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		s.Source = informer.New(client, informer.Config{NodeName: s.nodeName, ResyncPeriod: o.cfg.ConfigSyncPeriod.Duration, Logger: log, Registerer: s.reg})
		if o.explain == nil && o.troubleshoot == nil {
			b := record.NewBroadcaster(record.WithContext(ctx))
			b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
			s.recorder = b.NewRecorder(scheme.Scheme, v1.EventSource{Component: "proxykit-nodeagent", Host: s.nodeName})
			s.close = b.Shutdown
		}
	}
	return s, nil
}

// useDemo makes the bundled demo manifests the source.
func (s *input) useDemo() error {
	objs, err := demoObjects()
	if err != nil {
		return err
	}
	s.Source, s.demo = source.Static(objs), true
	s.what = "demo manifests (built in)"
	if s.nodeName == "" {
		s.nodeName = demoNodeName
	}
	return nil
}

// noSourceDryRun makes a proxy run whose command line named no source a
// dry run, and says so at the default level: the demo is there so that
// the first command shows rules with no cluster and no root, and it is
// written into a kernel only when --demo asks for it, as kube-proxy
// programs nothing it was not pointed at. Mode userspace cannot print
// its rules (they name its forwarders' ports), so it refuses instead.
func (o *options) noSourceDryRun(log logr.Logger) error {
	const why = "no source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config)"
	if o.proxyMode == "userspace" && !o.dryRun {
		return fmt.Errorf("%s, and --proxy-mode userspace cannot print its rules instead: give a source, or --demo to program the bundled demo manifests", why)
	}
	o.dryRun = true
	log.Info("No source given (--kubeconfig, --master, --manifests, or a pod's in-cluster config): printing the rules of the bundled demo manifests, as --dry-run does, and changing nothing on this node; --demo programs them")
	return nil
}
