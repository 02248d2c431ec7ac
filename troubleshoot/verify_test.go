package troubleshoot

import (
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// programmed syncs s into a fake iptables and returns its nat and filter
// tables as iptables-save would list them.
func programmed(t *testing.T, s *dataplane.State) string {
	t.Helper()
	fake := xtables.NewFakeRunner()
	d, err := iptables.New(iptables.Config{Runner: fake})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return saved(t, fake)
}

func TestVerifyIPTables(t *testing.T) {
	db, dbSlice := dbObjects()
	base := build(t, web(lbWeb), webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode)), db, dbSlice)[0]
	webHTTP := dt.PortName("default", "web", "http", v1.ProtocolTCP)
	cases := []struct {
		name string
		// kernel is the State programmed, model the one verified (base
		// when nil); edit changes the listing.
		kernel, model *dataplane.State
		edit          func(string) string
		want          []Mismatch
		// summaries compares Mismatch.Model and Mismatch.Kernel too.
		summaries bool
	}{{
		name: "in sync",
	}, {
		name: "cluster IP rule deleted",
		edit: dropLines(`-A PK-SERVICES .*default/web:http cluster IP`),
		want: []Mismatch{{Service: webHTTP, Kind: Missing, Frontend: "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7",
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "not a service",
			Detail: "no rule of the proxy matches; the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)"}},
		summaries: true,
	}, {
		name: "source range rule deleted",
		edit: dropLines(`traffic not accepted by`),
		want: []Mismatch{{Service: webHTTP, Kind: Missing, Frontend: "5.6.7.8:80/TCP (load balancer IP) from 198.51.100.7",
			Model: "drop", Kernel: "not a service", Detail: "no rule of the proxy matches; the model says drop"}},
		summaries: true,
	}, {
		name: "another program's DNAT first",
		edit: insertAfter("*nat", "-A PREROUTING -d 172.30.0.10/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.9.9.9:80"),
		want: []Mismatch{{Service: webHTTP, Kind: Shadowed, Frontend: "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7",
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "DNAT to 10.9.9.9:80",
			Detail: "a rule that is not the proxy's decides first: DNAT to 10.9.9.9:80"}},
		summaries: true,
	}, {
		name:  "an endpoint changed",
		model: build(t, web(lbWeb), webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.8", otherNode)), db, dbSlice)[0],
		want: func() []Mismatch {
			var out []Mismatch
			for _, fe := range []string{"172.30.0.10:80/TCP (cluster IP) from 198.51.100.7", "192.168.0.2:30080/TCP (node port) from 198.51.100.7",
				"192.168.1.2:30080/TCP (node port) from 198.51.100.7", "5.6.7.8:80/TCP (load balancer IP) from 203.0.113.0"} {
				out = append(out, Mismatch{Service: webHTTP, Kind: WrongEndpoints, Frontend: fe,
					Detail: "missing 10.1.0.8:8080; extra 10.1.0.7:8080"})
			}
			return out
		}(),
	}, {
		name:  "a service the model no longer has",
		model: build(t, web(lbWeb), webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode)))[0],
		want: []Mismatch{{Service: dt.PortName("default", "db", "", v1.ProtocolTCP), Kind: Extra,
			Detail: "the kernel holds rules for this service port, the model has no such port"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kernel, model := base, base
			if tc.kernel != nil {
				kernel = tc.kernel
			}
			if tc.model != nil {
				model = tc.model
			}
			save := programmed(t, kernel)
			if tc.edit != nil {
				save = tc.edit(save)
			}
			k := xtables.NewReading([]byte(save), model.Node.IPs)
			if len(k.Skipped) > 0 {
				t.Fatalf("skipped %v", k.Skipped)
			}
			got := Verify(model, dataplane.ModeIPTables, k)
			opts := []cmp.Option{cmpopts.EquateEmpty()}
			if !tc.summaries {
				opts = append(opts, cmpopts.IgnoreFields(Mismatch{}, "Model", "Kernel"))
			}
			if diff := cmp.Diff(tc.want, got, opts...); diff != "" {
				t.Errorf("Verify (-want +got):\n%s", diff)
			}
		})
	}
}

// listeners is a ListenerLister listening for its frontends.
type listeners map[servicemodel.Frontend]string

func (l listeners) ListeningFrontends() map[servicemodel.Frontend]string { return l }

func dropLines(re string) func(string) string {
	r := regexp.MustCompile(re)
	return func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if !r.MatchString(l) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
}

func insertAfter(header, line string) func(string) string {
	return func(s string) string { return strings.Replace(s, header+"\n", header+"\n"+line+"\n", 1) }
}

func TestVerifyListeners(t *testing.T) {
	s := build(t, web(func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode)),
		dt.MakeService("default", "empty", func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.30", []string{"172.30.0.30"}
			s.Spec.Ports = []v1.ServicePort{dt.ServicePort("", v1.ProtocolUDP, 53, 0, 0)}
		}))[0]
	tcp := func(ip string, port uint16) servicemodel.Frontend {
		fe := servicemodel.Frontend{Port: port, Protocol: v1.ProtocolTCP}
		if ip != "" {
			fe.IP = netip.MustParseAddr(ip)
		}
		return fe
	}
	listening := listeners{tcp("172.30.0.10", 80): "cluster IP", tcp("", 30080): "node port"}
	if got := VerifyListeners(s, listening); len(got) != 0 {
		t.Errorf("in sync: %v", got)
	}
	delete(listening, tcp("", 30080))
	listening[tcp("172.30.0.99", 80)] = "cluster IP"
	want := []Mismatch{
		{Kind: Extra, Frontend: "172.30.0.99:80/TCP", Detail: "a forwarder listens for 172.30.0.99:80/TCP (cluster IP), the model has no endpoint there"},
		{Service: dt.PortName("default", "web", "http", v1.ProtocolTCP), Kind: Missing, Frontend: "0.0.0.0:30080/TCP", Detail: "no forwarder listens for it; the model has endpoints"},
	}
	if diff := cmp.Diff(want, VerifyListeners(s, listening)); diff != "" {
		t.Errorf("VerifyListeners (-want +got):\n%s", diff)
	}
}
