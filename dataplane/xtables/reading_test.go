package xtables_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
)

// readingSave is a nat table with a dataplane's chain (PKV-) and another
// program's, both jumped to from PREROUTING.
const readingSave = `*nat
:PREROUTING ACCEPT [0:0]
:OTHER - [0:0]
:PKV-SERVICES - [0:0]
-A PREROUTING -j PKV-SERVICES
-A PREROUTING -j OTHER
-A OTHER -d 10.96.0.20/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 10.0.0.9:80
-A PKV-SERVICES -d 10.96.0.10/32 -p tcp -m comment --comment "default/web:http cluster IP" -m tcp --dport 80 -j ACCEPT
COMMIT
`

// TestReading: NewReadingWithout leaves out the dataplane's chains and the
// jumps to them, and with them the service ports their comments name.
func TestReading(t *testing.T) {
	type view struct {
		Chains     []string
		Prerouting []string
		Services   []servicemodel.PortName
	}
	web := servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: "default", Name: "web"}, Port: "http", Protocol: "TCP"}
	cases := []struct {
		name string
		read *xtables.Reading
		want view
	}{{
		name: "everyone's",
		read: xtables.NewReading([]byte(readingSave), nil),
		want: view{Chains: []string{"INPUT", "OTHER", "OUTPUT", "PKV-SERVICES", "POSTROUTING", "PREROUTING"},
			Prerouting: []string{"-j PKV-SERVICES", "-j OTHER"}, Services: []servicemodel.PortName{web}},
	}, {
		name: "without PKV-",
		read: xtables.NewReadingWithout([]byte(readingSave), "PKV-", nil),
		want: view{Chains: []string{"INPUT", "OTHER", "OUTPUT", "POSTROUTING", "PREROUTING"}, Prerouting: []string{"-j OTHER"}},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.read.Skipped) > 0 {
				t.Fatalf("skipped %v", tc.read.Skipped)
			}
			got := view{Chains: tc.read.Rules.Chains("nat"), Prerouting: tc.read.Rules.Rules("nat", "PREROUTING"), Services: tc.read.Services()}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reading (-want +got):\n%s", diff)
			}
		})
	}
}
