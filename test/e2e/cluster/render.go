package cluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/node/util/sysctl"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Paths inside a node's mount namespace: containerd's and the CNI plugins'
// defaults where they are private to the node (under its tmpfs), the
// Debian package's plugin directory otherwise.
const (
	containerdSocket = "/run/containerd/containerd.sock"
	cniConfDir       = "/run/cni/net.d"
	cniConfFile      = cniConfDir + "/10-e2e.conflist"
	cniBinDir        = "/usr/lib/cni"
	pauseImage       = "registry.k8s.io/pause:3.10.2"
)

// kubeletConfig is node i's KubeletConfiguration: cgroupfs under
// cgroupRoot, in the fixture's tree (cgroup v1 accepted: the machines are hybrid hosts
// without systemd), no swap check, anonymous and always-allowed access
// (the API server's exec, logs and port-forward need no kubelet client
// certificate), and images never collected (they cannot be pulled again).
func kubeletConfig(i int, cgroupRoot string) *kubeletv1beta1.KubeletConfiguration {
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		FailCgroupV1:             ptr.To(false),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               cgroupRoot,
		FailSwapOn:               ptr.To(false),
		ContainerRuntimeEndpoint: "unix://" + containerdSocket,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(true)},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:               kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeAlwaysAllow},
		ClusterDNS:                  []string{DNSServiceIP},
		ClusterDomain:               ClusterDomain,
		ResolverConfig:              ptr.To("/etc/resolv.conf"),
		Address:                     NodeIP(i).String(),
		ReadOnlyPort:                0,
		HealthzBindAddress:          "127.0.0.1",
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		EvictionHard: map[string]string{
			"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
		},
		EnforceNodeAllocatable: []string{"pods"},
		SerializeImagePulls:    ptr.To(false),
		MaxPods:                250,
	}
}

// kubeletConfigYAML is kubeletConfig as kubelet's --config file.
func kubeletConfigYAML(i int, cgroupRoot string) ([]byte, error) {
	b, err := yaml.Marshal(kubeletConfig(i, cgroupRoot))
	if err != nil {
		return nil, fmt.Errorf("cluster: kubelet config of node %d: %w", i, err)
	}
	return b, nil
}

// containerdConfig is every node's containerd configuration (version 2,
// containerd 1.6): default root, state and socket (private per node), the
// opt plugin's directory moved off the shared /opt, runc with cgroupfs,
// and the CRI settings without which no pod starts here:
// restrict_oom_score_adj (root lacks CAP_SYS_RESOURCE, so a negative
// oom_score_adj fails every sandbox), no AppArmor, and the pause image
// imported beside agnhost.
func containerdConfig() []byte {
	return []byte(`version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0
[grpc]
  address = "` + containerdSocket + `"
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "` + pauseImage + `"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "` + cniBinDir + `"
    conf_dir = "` + cniConfDir + `"
`)
}

// cniConfList is a CNI network configuration list; only the fields the
// fixture sets.
type cniConfList struct {
	CNIVersion string      `json:"cniVersion"`
	Name       string      `json:"name"`
	Plugins    []cniPlugin `json:"plugins"`
}

type cniPlugin struct {
	Type         string          `json:"type"`
	Bridge       string          `json:"bridge,omitempty"`
	IsGateway    bool            `json:"isGateway,omitempty"`
	IPMasq       bool            `json:"ipMasq"`
	HairpinMode  bool            `json:"hairpinMode,omitempty"`
	IPAM         *cniIPAM        `json:"ipam,omitempty"`
	Capabilities map[string]bool `json:"capabilities,omitempty"`
}

type cniIPAM struct {
	Type   string       `json:"type"`
	Ranges [][]cniRange `json:"ranges"`
	Routes []cniRoute   `json:"routes"`
}

type cniRange struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
}

type cniRoute struct {
	Dst string `json:"dst"`
}

// cniConfig is a node's pod network: bridge cni0 as the pods' gateway
// (hairpin on, so a pod reaches itself through a Service), host-local
// addresses from the node's podCIDR, no masquerading (pod subnets are
// routed between nodes), and portmap for hostPort pods.
func cniConfig(podCIDR netip.Prefix) cniConfList {
	gw := podCIDR.Masked().Addr().Next()
	return cniConfList{
		CNIVersion: "0.4.0",
		Name:       "e2e",
		Plugins: []cniPlugin{
			{
				Type: "bridge", Bridge: "cni0", IsGateway: true, HairpinMode: true,
				IPAM: &cniIPAM{
					Type:   "host-local",
					Ranges: [][]cniRange{{{Subnet: podCIDR.Masked().String(), Gateway: gw.String()}}},
					Routes: []cniRoute{{Dst: "0.0.0.0/0"}},
				},
			},
			{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}},
		},
	}
}

// cniConfigJSON is cniConfig as the file containerd reads.
func cniConfigJSON(podCIDR netip.Prefix) ([]byte, error) {
	b, err := json.MarshalIndent(cniConfig(podCIDR), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cluster: CNI config for %s: %w", podCIDR, err)
	}
	return append(b, '\n'), nil
}

// corefile is CoreDNS's configuration: bound to the first node's IP (the
// kube-dns Service's only endpoint), serving the cluster domain and
// reverse zones from the API server through kubeconfigPath.
func corefile(kubeconfigPath string) []byte {
	return []byte(strings.Join([]string{
		".:53 {",
		"    bind " + NodeIP(1).String(),
		"    errors",
		"    kubernetes " + ClusterDomain + " in-addr.arpa ip6.arpa {",
		"        kubeconfig " + kubeconfigPath,
		"        pods insecure",
		"        fallthrough in-addr.arpa ip6.arpa",
		"        ttl 5",
		"    }",
		"}",
		"",
	}, "\n"))
}

// resolvConf is every node's /etc/resolv.conf: CoreDNS, so that the pods
// with dnsPolicy Default and the node's own programs resolve Services too.
func resolvConf() []byte {
	return []byte("nameserver " + NodeIP(1).String() + "\n")
}

// kubeletTunables are the kernel settings kubelet sets at start unless they
// hold these values already (protectKernelDefaults only turns its writes
// into a refusal to start). They are machine-wide, not per namespace: each
// node sees files with these values bound over them in its own mount
// namespace, so kubelet finds them as it wants them and writes nothing to
// the machine's (panic on oops and reboot after 10 s among them).
func kubeletTunables() map[string]int {
	return map[string]int{
		sysctl.VMOvercommitMemory: sysctl.VMOvercommitMemoryAlways,
		sysctl.VMPanicOnOOM:       sysctl.VMPanicOnOOMInvokeOOMKiller,
		sysctl.KernelPanic:        sysctl.KernelPanicRebootTimeout,
		sysctl.KernelPanicOnOops:  sysctl.KernelPanicOnOopsAlways,
		sysctl.RootMaxKeys:        sysctl.RootMaxKeysSetting,
		sysctl.RootMaxBytes:       sysctl.RootMaxBytesSetting,
	}
}

// tunableFile is the name in WorkDir of the file bound over
// /proc/sys/<path> in every node.
func tunableFile(path string) string {
	return filepath.Join("kernel", strings.ReplaceAll(path, "/", "."))
}
