package ruleport_test

import (
	"fmt"
	"net/netip"

	"github.com/proxykit/proxykit/internal/ruleport"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func Example() {
	sp := &servicemodel.ServicePort{
		Name:        servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: v1.ProtocolTCP},
		Protocol:    v1.ProtocolTCP,
		ClusterIP:   netip.MustParseAddr("10.96.0.10"),
		Port:        80,
		ExternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
	}
	p, reason := ruleport.Check(sp, false, func(r string) { fmt.Println("dropped:", r) })
	fmt.Println(p.Proto, p.ExternalIPs, reason == "")
	_, reason = ruleport.Check(sp, true, func(string) {})
	fmt.Println(reason)
	// Output:
	// dropped: external IP invalid or of another family
	// tcp [192.0.2.1] true
	// cluster IP missing or of another family
}
