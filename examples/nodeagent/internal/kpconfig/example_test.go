package kpconfig_test

import (
	"fmt"

	"github.com/proxykit/proxykit/examples/nodeagent/internal/kpconfig"
)

// Example decodes a kube-proxy configuration file, completes it as
// kube-proxy does at start and validates it.
func Example() {
	codecs, err := kpconfig.NewCodecs()
	if err != nil {
		panic(err)
	}
	d, err := codecs.Decode([]byte(`
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clusterCIDR: 10.244.0.0/16
iptables:
  masqueradeBit: 40
`))
	if err != nil {
		panic(err)
	}
	c := d.Config
	kpconfig.Complete(c)
	sync, minSync := kpconfig.Periods(c)
	fmt.Println(c.Mode, c.NodePortAddresses, sync.Duration, minSync.Duration, c.MetricsBindAddress)
	for _, e := range kpconfig.Validate(c, kpconfig.ValidateOptions{}) {
		fmt.Println(e)
	}
	// Output:
	// nftables [primary] 30s 1s 127.0.0.1:10249
	// iptables.masqueradeBit: Invalid value: 40: must be within the range [0, 31]
}
