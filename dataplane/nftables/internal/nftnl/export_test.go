package nftnl

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/knftables"
)

// ServiceOps is a table shaped as the dataplane's at services × endpoints:
// per service a chain choosing among its endpoints through a shard map,
// its element in service-ips and cluster-ips, and its endpoints.
func ServiceOps(services, endpoints int) []Op {
	ops := []Op{
		{Verb: Add, Obj: &knftables.Table{}},
		{Verb: Add, Obj: &knftables.Set{Name: "cluster-ips", Type: "ipv4_addr"}},
		{Verb: Add, Obj: &knftables.Map{Name: "service-ips", Type: "ipv4_addr . inet_proto . inet_service : verdict"}},
	}
	const shards = 1024
	for s := range shards {
		ops = append(ops, Op{Verb: Add, Obj: &knftables.Map{Name: fmt.Sprintf("dnat-tcp-%03x", s), TypeOf: "numgen random mod 1 : ip daddr . tcp dport"}})
	}
	var elems []Op
	for i := range services {
		chain := fmt.Sprintf("service-%d/ns/svc/tcp/p", i)
		ip := fmt.Sprintf("172.%d.%d.%d", 16+i>>16, i>>8&0xff, i&0xff)
		shard := fmt.Sprintf("dnat-tcp-%03x", i%shards)
		slot := i / shards << 16
		ops = append(ops,
			Op{Verb: Add, Obj: &knftables.Chain{Name: chain}},
			Op{Verb: Add, Obj: &knftables.Rule{Chain: chain, Rule: fmt.Sprintf("meta l4proto tcp dnat ip addr . port to numgen random mod %d offset %d map @%s", endpoints, slot, shard)}})
		elems = append(elems,
			Op{Verb: Add, Obj: &knftables.Element{Set: "cluster-ips", Key: []string{ip}}},
			Op{Verb: Add, Obj: &knftables.Element{Map: "service-ips", Key: []string{ip + " . tcp . 80"}, Value: []string{"goto " + chain}}})
		for e := range endpoints {
			elems = append(elems, Op{Verb: Add, Obj: &knftables.Element{Map: shard,
				Key: []string{fmt.Sprint(slot + e)}, Value: []string{fmt.Sprintf("10.%d.%d.%d . 8080", i>>16, i>>8&0xff, e+1)}}})
		}
	}
	return append(ops, elems...)
}

// BenchmarkEncode encodes the batch of a cold sync of 10,000 services
// with 10 endpoints each: the userspace part of Run.
func BenchmarkEncode(b *testing.B) {
	ops := ServiceOps(10_000, 10)
	b.ReportAllocs()
	for b.Loop() {
		c := &Conn{family: knftables.IPv4Family, fam: 2, table: "t", types: map[string]*setType{}}
		bt := &batch{c: c, types: map[string]*setType{}, ids: map[string]uint32{}}
		if err := bt.encode(context.Background(), ops); err != nil {
			b.Fatal(err)
		}
	}
}

// EncodeForTest is the batch Run would send for ops, in a table of
// family without set types from the kernel.
func EncodeForTest(family knftables.Family, table string, ops []Op) ([]byte, error) {
	fam := byte(2)
	if family == knftables.IPv6Family {
		fam = 10
	}
	c := &Conn{family: family, fam: fam, table: table, types: map[string]*setType{}}
	bt := &batch{c: c, types: map[string]*setType{}, ids: map[string]uint32{}}
	err := bt.encode(context.Background(), ops)
	return bt.w.b, err
}
