package servicemodel_test

import (
	"errors"
	"fmt"

	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A tracker turns Service updates into snapshots, and reports what went
// stale when a UDP port is removed.
func Example() {
	var skipped []string
	tr := servicemodel.NewTracker(servicemodel.Config{
		OnSkip: func(reason string) { skipped = append(skipped, reason) },
	})
	dns := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-dns"},
		Spec: v1.ServiceSpec{
			ClusterIP: "10.96.0.10",
			Ports: []v1.ServicePort{
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53},
				{Name: "dns-tcp", Protocol: v1.ProtocolTCP, Port: 53},
				{Name: "metrics", Protocol: v1.ProtocolTCP, Port: 70000},
			},
		},
	}
	tr.Update(nil, dns)
	m, _ := tr.Checkout()
	for _, p := range m.Service(types.NamespacedName{Namespace: "kube-system", Name: "kube-dns"}) {
		fmt.Println(p.Name, p)
	}
	fmt.Println("skipped:", skipped)

	tcpOnly := dns.DeepCopy()
	tcpOnly.Spec.Ports = tcpOnly.Spec.Ports[1:2]
	tr.Update(dns, tcpOnly)
	m, ch := tr.Checkout()
	fmt.Println("ports:", m.Len())
	for _, f := range ch.Stale {
		fmt.Printf("stale: %s:%d/%s\n", f.IP, f.Port, f.Protocol)
	}
	// Output:
	// kube-system/kube-dns:dns 10.96.0.10:53/UDP
	// kube-system/kube-dns:dns-tcp 10.96.0.10:53/TCP
	// skipped: [invalid-port]
	// ports: 1
	// stale: 10.96.0.10:53/UDP
}

// Normalize can be used alone; a skipped service comes with its reason.
func ExampleNormalize() {
	headless := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec:       v1.ServiceSpec{ClusterIP: v1.ClusterIPNone},
	}
	ports, err := servicemodel.Normalize(headless, v1.IPv4Protocol, "")
	var skip *servicemodel.SkipError
	if errors.As(err, &skip) {
		fmt.Println(len(ports), skip.Reason)
	}
	// Output:
	// 0 headless
}
