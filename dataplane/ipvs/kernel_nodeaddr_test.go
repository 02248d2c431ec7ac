package ipvs

import (
	"bufio"
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/netns"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// TestKernelNodeAddresses: node ports answer on every address the node
// has, not only on those of its Node object, and follow the addresses
// as they come and go: the canary reports the change and a Reconcile, as
// the proxy runs one then, programs it.
func TestKernelNodeAddresses(t *testing.T) {
	requireIPVS(t)
	ctx := t.Context()
	node, client, pod := netns.New(t, "node"), netns.New(t, "client"), netns.New(t, "pod")
	// 192.168.0.2 is the Node object's address; 10.50.0.2 is a second
	// NIC's, which the Node object does not list.
	netns.Veth(t, node, "eth0", []string{"192.168.0.2/24"}, client, "eth0", []string{"192.168.0.9/24"})
	netns.Veth(t, node, "eth1", []string{"10.50.0.2/24"}, client, "eth1", []string{"10.50.0.9/24"})
	netns.Veth(t, node, "veth0", []string{"10.1.0.1/24"}, pod, "eth0", []string{"10.1.0.2/24"})
	pod.MustRun("ip", "route", "add", "default", "via", "10.1.0.1")
	ep := netip.MustParseAddrPort("10.1.0.2:8080")
	serveEcho(t, pod, ep)

	b := dataplane.NewBuilder(dataplane.BuilderConfig{NodeName: dataplanetest.NodeName})
	b.UpdateNode(dataplanetest.MakeNode(dataplanetest.NodeName, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.2"}}
	}))
	b.UpdateService(nil, dataplanetest.MakeService("ns1", "svc1", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.ClusterIP = "172.30.0.41"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p80", v1.ProtocolTCP, 80, 30080, 8080)}
	}))
	b.UpdateEndpointSlice(nil, dataplanetest.MakeSlice("ns1", "svc1", 0, func(sl *discovery.EndpointSlice) {
		sl.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("p80", v1.ProtocolTCP, 8080)}
		sl.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(ep.Addr().String(), "")}
	}))
	st := b.Build().States[0]
	var d *Dataplane
	if err := node.Do(func() (err error) {
		if d, err = New(Config{}); err != nil {
			return err
		}
		return d.Sync(ctx, st)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Do(func() error { return d.Cleanup(t.Context()) }) })

	// answers says what a connection from the client to addr:30080 met.
	answers := func(addr string) error {
		return client.Do(func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "30080"), 5*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("hi\n")); err != nil {
				return err
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err == nil && line != ep.String()+"\n" {
				err = errors.New("answered by " + line)
			}
			return err
		})
	}
	changed := func(want bool) {
		t.Helper()
		var got bool
		if err := node.Do(func() (err error) { got, err = d.KernelChanged(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("KernelChanged = %v, want %v", got, want)
		}
	}
	reconcile := func() []string {
		t.Helper()
		var drift dataplane.Drift
		if err := node.Do(func() (err error) { drift, err = d.Reconcile(ctx); return err }); err != nil {
			t.Fatal(err)
		}
		return drift.Repaired
	}

	for _, addr := range []string{"192.168.0.2", "10.50.0.2"} {
		if err := answers(addr); err != nil {
			t.Errorf("node port on %s: %v", addr, err)
		}
	}
	changed(false)

	// An address added on a link: refused until the canary's
	// Reconcile, then served.
	// A /32, so that it outlives the removal of the link's primary
	// address below (the kernel deletes a prefix's secondaries with it).
	node.MustRun("ip", "addr", "add", "10.50.0.3/32", "dev", "eth1")
	if err := answers("10.50.0.3"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("node port on a new address before any sync: %v, want it refused", err)
	}
	changed(true)
	if got := reconcile(); !slices.Contains(got, "virtual server TCP 10.50.0.3:30080: created") {
		t.Errorf("Reconcile after an address was added repaired %q", got)
	}
	changed(false)
	if err := answers("10.50.0.3"); err != nil {
		t.Errorf("node port on the new address: %v", err)
	}

	// An address removed: its virtual server goes too.
	node.MustRun("ip", "addr", "del", "10.50.0.2/24", "dev", "eth1")
	changed(true)
	if got := reconcile(); !slices.Contains(got, "virtual server TCP 10.50.0.2:30080: deleted") {
		t.Errorf("Reconcile after an address was removed repaired %q", got)
	}
	changed(false)
	var r *Reading
	if err := node.Do(func() (err error) { r, err = d.Read(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	var vss []string
	for _, vs := range r.VirtualServers {
		vss = append(vss, vs.Address.String())
	}
	// The pod link's gateway address is the node's too.
	want := []string{"10.1.0.1:30080", "10.50.0.3:30080", "172.30.0.41:80", "192.168.0.2:30080"}
	if !slices.Equal(vss, want) {
		t.Errorf("virtual servers %q, want %q", vss, want)
	}
}
