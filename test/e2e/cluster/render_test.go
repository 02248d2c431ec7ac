package cluster

import (
	"encoding/json"
	"net/netip"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

func TestKubeletConfigYAML(t *testing.T) {
	b, err := kubeletConfigYAML(2, "/proxykit-e2e/c-1/node-2")
	if err != nil {
		t.Fatal(err)
	}
	want := `address: 10.88.0.3
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: true
  webhook:
    cacheTTL: 0s
    enabled: false
  x509: {}
authorization:
  mode: AlwaysAllow
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: cgroupfs
cgroupRoot: /proxykit-e2e/c-1/node-2
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
cpuManagerReconcilePeriod: 0s
crashLoopBackOff: {}
enforceNodeAllocatable:
- pods
evictionHard:
  imagefs.available: 1%
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
evictionPressureTransitionPeriod: 0s
failCgroupV1: false
failSwapOn: false
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
httpCheckFrequency: 0s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
maxPods: 250
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /etc/resolv.conf
runtimeRequestTimeout: 0s
serializeImagePulls: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("kubelet config (-want +got):\n%s", diff)
	}
	// The file decodes back into the same value: no field lost to a tag.
	var back kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(kubeletConfig(2, "/proxykit-e2e/c-1/node-2"), &back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

func TestContainerdConfig(t *testing.T) {
	want := `version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
oom_score = 0
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10.2"
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
    bin_dir = "/usr/lib/cni"
    conf_dir = "/run/cni/net.d"
`
	if diff := cmp.Diff(want, string(containerdConfig())); diff != "" {
		t.Errorf("containerd config (-want +got):\n%s", diff)
	}
}

func TestCNIConfig(t *testing.T) {
	for _, tc := range []struct {
		podCIDR         string
		subnet, gateway string
	}{
		{"10.244.0.0/24", "10.244.0.0/24", "10.244.0.1"},
		{"10.244.2.0/24", "10.244.2.0/24", "10.244.2.1"},
		{"10.244.1.7/24", "10.244.1.0/24", "10.244.1.1"}, // not masked: masked here
	} {
		b, err := cniConfigJSON(netip.MustParsePrefix(tc.podCIDR))
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"cniVersion": "0.4.0",
			"name":       "e2e",
			"plugins": []any{
				map[string]any{
					"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
					"ipam": map[string]any{
						"type":   "host-local",
						"ranges": []any{[]any{map[string]any{"subnet": tc.subnet, "gateway": tc.gateway}}},
						"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
					},
				},
				map[string]any{"type": "portmap", "ipMasq": false, "capabilities": map[string]any{"portMappings": true}},
			},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: CNI config (-want +got):\n%s", tc.podCIDR, diff)
		}
	}
}

func TestCorefileAndResolvConf(t *testing.T) {
	want := `.:53 {
    bind 10.88.0.2
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig /w/admin.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
}
`
	if diff := cmp.Diff(want, string(corefile("/w/admin.kubeconfig"))); diff != "" {
		t.Errorf("Corefile (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("nameserver 10.88.0.2\n", string(resolvConf())); diff != "" {
		t.Errorf("resolv.conf (-want +got):\n%s", diff)
	}
}

func TestKubeletTunables(t *testing.T) {
	got := map[string]string{}
	for path, v := range kubeletTunables() {
		got[tunableFile(path)] = "/proc/sys/" + path + "=" + strconv.Itoa(v)
	}
	want := map[string]string{
		"kernel/vm.overcommit_memory":      "/proc/sys/vm/overcommit_memory=1",
		"kernel/vm.panic_on_oom":           "/proc/sys/vm/panic_on_oom=0",
		"kernel/kernel.panic":              "/proc/sys/kernel/panic=10",
		"kernel/kernel.panic_on_oops":      "/proc/sys/kernel/panic_on_oops=1",
		"kernel/kernel.keys.root_maxkeys":  "/proc/sys/kernel/keys/root_maxkeys=1000000",
		"kernel/kernel.keys.root_maxbytes": "/proc/sys/kernel/keys/root_maxbytes=25000000",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tunables (-want +got):\n%s", diff)
	}
}
