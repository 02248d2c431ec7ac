package sysctl_test

import (
	"fmt"

	"github.com/proxykit/proxykit/dataplane/sysctl"
)

// A dataplane takes a sysctl.Interface; tests hand it a Fake and read back
// what it set.
func Example() {
	var s sysctl.Interface = sysctl.NewFake(map[string]string{
		"net/netfilter/nf_conntrack_tcp_be_liberal": "0",
	})
	_ = s.Set("net/ipv4/conf/all/route_localnet", "1")
	v, _ := s.Get("net/ipv4/conf/all/route_localnet")
	_, err := s.Get("net/ipv4/vs/conntrack")
	fmt.Println(v, sysctl.IsNotExist(err))
	// Output: 1 true
}
