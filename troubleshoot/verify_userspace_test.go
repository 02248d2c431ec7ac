package troubleshoot

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/iptables"
	"github.com/proxykit/proxykit/dataplane/userspace"
	v1 "k8s.io/api/core/v1"
)

// redirected syncs s into a userspace dataplane in redirect mode over a
// fake iptables (its forwarders listen on free ports of this machine) and
// returns the nat and filter tables as iptables-save would list them.
func redirected(t *testing.T, s *dataplane.State) string {
	t.Helper()
	fake := iptables.NewFakeRunner()
	d, err := userspace.New(userspace.Config{Redirect: &userspace.RedirectConfig{Runner: fake}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Cleanup(t.Context()) })
	if err := d.Sync(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return saved(t, fake)
}

var redirectRule = regexp.MustCompile(`(?m)^-A .*"([^ ]+) ([^"]+)".* -p (tcp|udp).* --to-ports (\d+)$`)

// listeningOn is Userspace.Listening for the forwarders save redirects
// to, less those of the frontends closed names ("ns/name:port kind").
func listeningOn(save string, closed ...string) func(v1.Protocol, uint16) bool {
	open := map[string]bool{}
	for _, m := range redirectRule.FindAllStringSubmatch(save, -1) {
		if !strings.Contains(strings.Join(closed, "\n"), m[1]+" "+m[2]) {
			open[strings.ToUpper(m[3])+"/"+m[4]] = true
		}
	}
	return func(proto v1.Protocol, port uint16) bool { return open[string(proto)+"/"+strconv.Itoa(int(port))] }
}

func TestVerifyUserspace(t *testing.T) {
	db, dbSlice := dbObjects()
	base := build(t, web(lbWeb), webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode)), db, dbSlice)[0]
	webHTTP := dt.PortName("default", "web", "http", v1.ProtocolTCP)
	save := redirected(t, base)
	cluster := "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7"
	cases := []struct {
		name      string
		edit      func(string) string
		listening func(string) func(v1.Protocol, uint16) bool
		want      []Drift
	}{{
		name: "in sync",
	}, {
		name:      "in sync, every forwarder listening",
		listening: func(s string) func(v1.Protocol, uint16) bool { return listeningOn(s) },
	}, {
		name: "cluster IP redirect deleted",
		edit: dropLines(`-A PKU-SERVICES .*default/web:http cluster IP`),
		want: []Drift{{Service: webHTTP, Kind: Missing, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "not a service",
			Detail: "no rule of the proxy matches; the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)"}},
	}, {
		name:      "the forwarder is gone",
		listening: func(s string) func(v1.Protocol, uint16) bool { return listeningOn(s, "default/web:http cluster IP") },
		want: []Drift{{Service: webHTTP, Kind: WrongVerdict, Frontend: cluster,
			Model: "DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade)", Kernel: "reject",
			Detail: "the model says DNAT to 10.0.0.5:8080, 10.1.0.7:8080 (masquerade), the rules reject"}},
	}, {
		name: "another program's redirect first",
		edit: insertAfter("*nat", "-A PREROUTING -p tcp -j REDIRECT --to-ports 15001"),
		want: func() []Drift {
			out := []Drift{{Service: dt.PortName("default", "db", "", v1.ProtocolTCP), Kind: Shadowed,
				Frontend: "172.30.0.20:5432/TCP (cluster IP) from 198.51.100.7", Kernel: "DNAT to 0.0.0.0:15001",
				Detail: "a rule that is not the proxy's decides first: DNAT to 0.0.0.0:15001"}}
			for _, fe := range []string{cluster, "192.168.0.2:30080/TCP (node port) from 198.51.100.7", "192.168.1.2:30080/TCP (node port) from 198.51.100.7",
				"5.6.7.8:80/TCP (load balancer IP) from 198.51.100.7", "5.6.7.8:80/TCP (load balancer IP) from 203.0.113.0"} {
				out = append(out, Drift{Service: webHTTP, Kind: Shadowed, Frontend: fe, Kernel: "DNAT to 0.0.0.0:15001",
					Detail: "a rule that is not the proxy's decides first: DNAT to 0.0.0.0:15001"})
			}
			return out
		}(),
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := save
			if tc.edit != nil {
				s = tc.edit(s)
			}
			k := &Userspace{IPTables: NewIPTables([]byte(s), base.Node.IPs), Model: base}
			if len(k.IPTables.Skipped) > 0 {
				t.Fatalf("skipped %v", k.IPTables.Skipped)
			}
			if tc.listening != nil {
				k.Listening = tc.listening(s)
			}
			got := Verify(base, "userspace", k)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty(), cmpopts.IgnoreFields(Drift{}, "Model")); diff != "" {
				t.Errorf("Verify (-want +got):\n%s", diff)
			}
		})
	}
}
