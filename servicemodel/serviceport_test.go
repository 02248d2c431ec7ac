package servicemodel

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestCompareNames(t *testing.T) {
	nn := func(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }
	for _, tc := range []struct {
		name string
		in   []types.NamespacedName
		want []types.NamespacedName
	}{
		{"namespace first", []types.NamespacedName{nn("b", "a"), nn("a", "z")}, []types.NamespacedName{nn("a", "z"), nn("b", "a")}},
		{"then name", []types.NamespacedName{nn("a", "y"), nn("a", "x")}, []types.NamespacedName{nn("a", "x"), nn("a", "y")}},
		// Not the order of String: "a-b/x" < "a/x" as text, but namespace "a" comes first.
		{"not as text", []types.NamespacedName{nn("a-b", "x"), nn("a", "x")}, []types.NamespacedName{nn("a", "x"), nn("a-b", "x")}},
		{"equal", []types.NamespacedName{nn("a", "x"), nn("", ""), nn("a", "x")}, []types.NamespacedName{nn("", ""), nn("a", "x"), nn("a", "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := slices.SortedFunc(slices.Values(tc.in), CompareNames)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestPortNameCompare(t *testing.T) {
	pn := func(ns, name, port string, proto v1.Protocol) PortName {
		return PortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
	}
	for _, tc := range []struct {
		name string
		a, b PortName
		want int
	}{
		{"equal", pn("a", "s", "http", v1.ProtocolTCP), pn("a", "s", "http", v1.ProtocolTCP), 0},
		{"service first", pn("a", "t", "a", v1.ProtocolTCP), pn("b", "s", "z", v1.ProtocolTCP), -1},
		{"then port name", pn("a", "s", "https", v1.ProtocolTCP), pn("a", "s", "http", v1.ProtocolUDP), 1},
		{"then protocol", pn("a", "s", "dns", v1.ProtocolTCP), pn("a", "s", "dns", v1.ProtocolUDP), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := []int{tc.a.Compare(tc.b), tc.b.Compare(tc.a)}
			if diff := cmp.Diff([]int{tc.want, -tc.want}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
