//go:build tools

package proxykit

import (
	_ "github.com/coreos/go-iptables/iptables"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/go-logr/logr"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/moby/ipvs"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/vishvananda/netlink"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/kubernetes/fake"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/klog/v2"
	_ "k8s.io/utils/clock"
	_ "sigs.k8s.io/knftables"
	_ "sigs.k8s.io/yaml"
)
