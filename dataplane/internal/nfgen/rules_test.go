package nfgen

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/internal/netns"
)

// TestKernelReadTable: the rules iptables-nft wrote read back with the
// same sums until one changes, whatever the counters say, and with the
// chains their jumps name.
func TestKernelReadTable(t *testing.T) {
	netns.Require(t, "iptables-nft", "ip6tables-nft")
	ns := netns.New(t, "nfrules")
	read := func(family uint8, table string) Table {
		t.Helper()
		var tb Table
		if err := ns.Do(func() (err error) {
			tb, err = ReadTable(context.Background(), family, table)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return tb
	}
	if tb := read(FamilyIPv4, "nat"); len(tb) != 0 {
		t.Fatalf("a namespace without tables: %v", tb)
	}
	for _, cmd := range [][]string{
		{"iptables-nft", "-t", "nat", "-N", "DEMO-SERVICES"},
		{"iptables-nft", "-t", "nat", "-A", "DEMO-SERVICES", "-d", "10.96.0.10/32", "-p", "tcp", "--dport", "80", "-m", "comment", "--comment", "demo web", "-j", "DNAT", "--to-destination", "10.0.0.1:8080"},
		{"iptables-nft", "-t", "nat", "-A", "DEMO-SERVICES", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "RETURN"},
		{"iptables-nft", "-t", "nat", "-I", "OUTPUT", "1", "-m", "comment", "--comment", "demo", "-j", "DEMO-SERVICES"},
		{"iptables-nft", "-t", "nat", "-A", "PREROUTING", "-s", "192.0.2.0/24", "-j", "RETURN"},
		{"ip6tables-nft", "-t", "nat", "-N", "DEMO-SERVICES"},
	} {
		ns.MustRun(cmd[0], cmd[1:]...)
	}
	before := read(FamilyIPv4, "nat")
	if got := len(before["DEMO-SERVICES"]); got != 2 {
		t.Errorf("DEMO-SERVICES holds %d rules, want 2", got)
	}
	jumps := map[string]bool{}
	for _, c := range []string{"OUTPUT", "PREROUTING"} {
		jumps[c] = before.Jumps(c, "DEMO-SERVICES")
	}
	if d := cmp.Diff(map[string]bool{"OUTPUT": true, "PREROUTING": false}, jumps); d != "" {
		t.Errorf("jumps to DEMO-SERVICES (-want +got):\n%s", d)
	}
	if tb := read(FamilyIPv6, "nat"); len(tb) != 0 {
		t.Errorf("IPv6 nat, an empty chain only: %v", tb)
	}
	// Counters: the rules' own, as traffic or -Z moves them.
	ns.MustRun("iptables-nft", "-t", "nat", "-Z")
	ns.MustRun("iptables-nft", "-t", "nat", "-I", "PREROUTING", "1", "-j", "RETURN")
	ns.MustRun("iptables-nft", "-t", "nat", "-D", "PREROUTING", "1")
	same := read(FamilyIPv4, "nat")
	if same.Sum("DEMO-SERVICES") != before.Sum("DEMO-SERVICES") {
		t.Errorf("the sum of an untouched chain moved")
	}
	ns.MustRun("iptables-nft", "-t", "nat", "-I", "DEMO-SERVICES", "1", "-j", "RETURN")
	if read(FamilyIPv4, "nat").Sum("DEMO-SERVICES") == before.Sum("DEMO-SERVICES") {
		t.Errorf("a foreign rule atop the chain left its sum")
	}
	ns.MustRun("iptables-nft", "-t", "nat", "-F", "OUTPUT")
	if read(FamilyIPv4, "nat").Jumps("OUTPUT", "DEMO-SERVICES") {
		t.Errorf("the jump survived a flush of OUTPUT")
	}
}

// BenchmarkKernelReadTable is one read of a nat table of 100 rules: what
// a canary pays when the generation moved.
func BenchmarkKernelReadTable(b *testing.B) {
	netns.Require(b, "iptables-nft-restore")
	ns := netns.New(b, "nfrules")
	var in strings.Builder
	in.WriteString("*nat\n:DEMO - [0:0]\n")
	for i := range 100 {
		fmt.Fprintf(&in, "-A DEMO -d 10.96.0.%d/32 -m comment --comment \"demo\" -j RETURN\n", i)
	}
	in.WriteString("COMMIT\n")
	cmd := ns.Command("iptables-nft-restore")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("iptables-nft-restore: %v: %s", err, out)
	}
	if err := ns.Do(func() error {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ReadTable(context.Background(), FamilyIPv4, "nat"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}
