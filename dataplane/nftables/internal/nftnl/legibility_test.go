package nftnl_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/nftables/internal/nftnl"
	"sigs.k8s.io/knftables"
)

// checkLegible programs script over netlink in one namespace and with
// nft -f in another, and requires nft to list both tables, as text and
// as bytecode, identically, and ListTable to print the text nft does. The same transaction in the same order gives
// the same handles and anonymous set numbers; the one thing normalised is
// the order of the element lines of each set in the bytecode listing,
// which is the kernel's hash order, seeded at random for every set.
func checkLegible(t *testing.T, family knftables.Family, script string) {
	t.Helper()
	ops, err := scriptOps(script)
	if err != nil {
		t.Fatal(err)
	}
	viaNetlink := newKernelNS(t, family)
	if err := viaNetlink.conn.Run(t.Context(), ops); err != nil {
		t.Fatalf("Run: %v", err)
	}
	viaNft := newKernelNS(t, family)
	f, err := os.CreateTemp(t.TempDir(), "script")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(script); err != nil {
		t.Fatal(err)
	}
	f.Close()
	viaNft.MustRun("nft", "-f", f.Name())
	gotText, gotCode := viaNetlink.listing(t, family)
	wantText, wantCode := viaNft.listing(t, family)
	gotCode, wantCode = sortElements(gotCode), sortElements(wantCode)
	if d := cmp.Diff(wantText, gotText); d != "" {
		t.Errorf("nft list table differs (-nft -netlink):\n%s", d)
	}
	listed, err := viaNetlink.conn.ListTable(t.Context())
	if err != nil {
		t.Errorf("ListTable: %v", err)
	} else if d := cmp.Diff(wantText, string(listed)); d != "" {
		t.Errorf("ListTable differs from nft list table (-nft +ListTable):\n%s", d)
	}
	if d := cmp.Diff(wantCode, gotCode); d != "" {
		t.Errorf("nft --debug=netlink list table differs (-nft -netlink):\n%s", d)
	}
}

// sortElements sorts each run of element lines.
func sortElements(s string) string {
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); {
		j := i
		for j < len(lines) && strings.HasPrefix(lines[j], "\telement ") {
			j++
		}
		slices.Sort(lines[i:j])
		i = max(j, i+1)
	}
	return strings.Join(lines, "\n")
}

// shapeScript is a table holding every rule shape, with the sets, maps
// and chains the shapes name.
func shapeScript(family knftables.Family) string {
	a, ipX := "ipv4_addr", "ip"
	if family == knftables.IPv6Family {
		a, ipX = "ipv6_addr", "ip6"
	}
	var b strings.Builder
	p := "add %s " + string(family) + " " + table + " "
	w := func(kind, rest string) { b.WriteString(strings.Replace(p, "%s", kind, 1) + rest + "\n") }
	w("table", `{ comment "rules for proxykit" ; }`)
	w("chain", "filter-input { type filter hook input priority 0 ; }")
	w("chain", "filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }")
	w("chain", "nat-postrouting { type nat hook postrouting priority 100 ; }")
	for _, c := range []string{"c", "firewall-check", "services", "masquerading", "service-X", "service-X/ns/svc/tcp/p", "endpoint-X", "endpoint-A", "endpoint-B"} {
		w("chain", c)
	}
	for _, s := range []string{"cluster-ips", "nodeport-ips", "affinity-X"} {
		extra := ""
		if s == "affinity-X" {
			extra = "flags dynamic,timeout ; timeout 10800s ; "
		}
		w("set", s+" { type "+a+" ; "+extra+`comment "c" ; }`)
	}
	w("set", "hairpin-connections { type "+a+" . "+a+" . inet_proto . inet_service ; comment \"service hairpin connections\" ; }")
	for _, m := range []string{"service-ips", "no-endpoint-services"} {
		w("map", m+" { type "+a+" . inet_proto . inet_service : verdict ; comment \"x\" ; }")
	}
	for _, m := range []string{"service-nodeports", "no-endpoint-nodeports"} {
		w("map", m+" { type inet_proto . inet_service : verdict ; }")
	}
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		w("map", "dnat-"+proto+"-000 { typeof numgen random mod 1 : "+ipX+" daddr . "+proto+" dport ; comment \"service endpoints by numgen value\" ; }")
		w("map", "cluster-endpoints-"+proto+"-00 { typeof "+ipX+" daddr . "+proto+" dport . numgen random mod 1 : "+ipX+" daddr . "+proto+" dport ; comment \"c\" ; }")
	}
	for _, c := range shapeCases() {
		if c.family == family {
			r := strings.NewReplacer("dnat-sctp-3c2", "dnat-sctp-000", "dnat-udp-036", "dnat-udp-000").Replace(c.rule)
			w("rule", "c "+r)
		}
	}
	ep, dest := "10.0.0.1 . 80 . 2 : 10.1.0.3 . 8080", "10.0.0.2 . 53 . 0 : 10.1.0.4 . 5353"
	if family == knftables.IPv6Family {
		ep, dest = "fd00::1 . 80 . 2 : fd00:10::3 . 8080", "fd00::2 . 53 . 0 : fd00:10::4 . 5353"
	}
	w("element", "cluster-endpoints-tcp-00 { "+ep+" }")
	w("element", "cluster-endpoints-udp-00 { "+dest+" }")
	w("rule", "c "+ipX+` daddr @cluster-ips reject comment "pk:sig@1"`)
	return b.String()
}

func TestKernelLegibleShapes(t *testing.T) {
	for _, family := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		t.Run(string(family), func(t *testing.T) {
			checkLegible(t, family, shapeScript(family))
		})
	}
}

func TestKernelLegibleScenarios(t *testing.T) {
	for _, st := range scenarioTables(t) {
		t.Run(st.name, func(t *testing.T) {
			checkLegible(t, st.family, st.script)
		})
	}
}

var _ = nftnl.Add

// TestKernelLegibleLargeSet: an anonymous set too large for one message
// (a firewall of 3,000 source ranges) is written over several, as nft
// does, and lists as nft's.
func TestKernelLegibleLargeSet(t *testing.T) {
	var ranges []string
	for i := range 3000 {
		ranges = append(ranges, fmt.Sprintf("10.%d.%d.0/24", i/100, 2*(i%100)))
	}
	p := "add %s ip " + table + " "
	script := fmt.Sprintf(p+"\n"+p+"firewall\n"+p+"firewall ip saddr != { %s } drop\n", "table", "chain", "rule", strings.Join(ranges, " , "))
	checkLegible(t, knftables.IPv4Family, script)
}

// TestKernelLegibleManyElements: a transaction ending in more elements
// than one goroutine encodes (a shared endpoint map's and a set's, 22,000
// in all) lists as nft's.
func TestKernelLegibleManyElements(t *testing.T) {
	var b strings.Builder
	p := "add %s ip " + table + " "
	fmt.Fprintf(&b, p+"\n", "table")
	fmt.Fprintf(&b, p+"shared { typeof ip daddr . tcp dport . numgen random mod 1 : ip daddr . tcp dport ; }\n", "map")
	fmt.Fprintf(&b, p+"ips { type ipv4_addr ; }\n", "set")
	for i := range 2000 {
		fmt.Fprintf(&b, p+"ips { 172.30.%d.%d }\n", "element", i>>8, i&255)
		for j := range 10 {
			fmt.Fprintf(&b, p+"shared { 172.30.%d.%d . 80 . %d : 10.%d.%d.%d . 8080 }\n", "element", i>>8, i&255, j, i>>8, i&255, j)
		}
	}
	checkLegible(t, knftables.IPv4Family, b.String())
}
