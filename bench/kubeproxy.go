package main

import (
	"context"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	sysctltest "k8s.io/component-helpers/node/util/sysctl/testing"
	"k8s.io/kubernetes/pkg/proxy"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	kubeiptables "k8s.io/kubernetes/pkg/proxy/iptables"
	kubenftables "k8s.io/kubernetes/pkg/proxy/nftables"
	proxyutil "k8s.io/kubernetes/pkg/proxy/util"
	utiliptables "k8s.io/kubernetes/pkg/util/iptables"
)

// kubeSystem is one of kube-proxy's proxiers, built by its exported
// constructor as kube-proxy builds it, with the settings proxykit's
// systems get (builderSettings).
//
// A proxier syncs asynchronously (Sync only queues a run of its
// BoundedFrequencyRunner, whose loop is not started here); its
// OnServiceSynced handler is the one entry point that syncs before it
// returns, so sync calls that.
type kubeSystem struct {
	p       proxy.Provider
	be      backend
	started bool
}

func kubeConfig() *kubeproxyconfig.KubeProxyConfiguration {
	bit, localhost := int32(14), false
	return &kubeproxyconfig.KubeProxyConfiguration{
		IPTables:      kubeproxyconfig.KubeProxyIPTablesConfiguration{MasqueradeBit: &bit, LocalhostNodePorts: &localhost},
		NFTables:      kubeproxyconfig.KubeProxyNFTablesConfiguration{MasqueradeBit: &bit},
		SyncPeriod:    metav1.Duration{Duration: 30 * time.Second},
		MinSyncPeriod: metav1.Duration{Duration: time.Second},
	}
}

func (s *kubeSystem) updateNode(*v1.Node) {}
func (s *kubeSystem) backend() backend    { return s.be }

func (s *kubeSystem) updateService(old, new *v1.Service) {
	if old == nil {
		s.p.OnServiceAdd(new)
		return
	}
	s.p.OnServiceUpdate(old, new)
}

func (s *kubeSystem) updateSlice(old, new *discovery.EndpointSlice) {
	if old == nil {
		s.p.OnEndpointSliceAdd(new)
		return
	}
	s.p.OnEndpointSliceUpdate(old, new)
}

// failed is implemented by the backends of kubeSystems: a proxier logs a
// failed sync and returns nothing.
type failed interface{ failedLast() error }

func (s *kubeSystem) sync() error {
	if !s.started {
		// Not yet initialized, so this one does not sync.
		s.p.OnEndpointSlicesSynced()
		s.started = true
	}
	s.p.OnServiceSynced()
	return s.be.(failed).failedLast()
}

func newKubeIPTables(be string, family v1.IPFamily) (system, error) {
	protocol := utiliptables.ProtocolIPv4
	if family == v1.IPv6Protocol {
		protocol = utiliptables.ProtocolIPv6
	}
	var ipt utiliptables.Interface
	switch be {
	case discard:
	case fake:
	case iptablesLegacy, iptablesNFT:
		// The child's PATH selects the variant (see kernelEnv).
		ipt = utiliptables.New(protocol)
	default:
		return nil, fmt.Errorf("kube-proxy iptables cannot run on %s", be)
	}
	b := &iptBackend{inner: ipt, protocol: protocol, record: be == fake}
	p, err := kubeiptables.NewProxier(context.Background(), kubeConfig(), family, b,
		sysctltest.NewFake(), proxyutil.NewDetectLocalByCIDR(familyClusterCIDR(family)), nodeName, net.ParseIP(familyNodeIP(family)),
		events.NewFakeRecorder(100), nil, false)
	if err != nil {
		return nil, err
	}
	return &kubeSystem{p: p, be: b}, nil
}

func newKubeNFTables(be string, family v1.IPFamily) (system, error) {
	if be != discard && be != nftables {
		return nil, fmt.Errorf("kube-proxy nftables cannot run on %s", be)
	}
	p, err := kubenftables.NewProxier(context.Background(), kubeConfig(), family,
		proxyutil.NewDetectLocalByCIDR(familyClusterCIDR(family)), nodeName, net.ParseIP(familyNodeIP(family)),
		events.NewFakeRecorder(100), nil, false)
	if err != nil {
		return nil, err
	}
	b, err := swapNFTables(p, family, be == discard)
	if err != nil {
		return nil, err
	}
	return &kubeSystem{p: p, be: b}, nil
}
