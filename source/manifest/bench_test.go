package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecodeEdit decodes a file of 10k Services and EndpointSlices
// after one endpoint changed: from scratch, and knowing the documents of
// the previous decode (what the Source does on a change).
func BenchmarkDecodeEdit(b *testing.B) {
	file := func(changed int) []byte {
		var sb strings.Builder
		for i := range 10000 {
			ip := fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
			if i == changed {
				ip = "10.9.9.9"
			}
			fmt.Fprintf(&sb, "apiVersion: v1\nkind: Service\nmetadata:\n  name: s%d\nspec:\n  clusterIP: 172.30.%d.%d\n  ports:\n  - name: p\n    port: 80\n---\n", i, i/250, i%250+1)
			fmt.Fprintf(&sb, "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: s%d-1\n  labels:\n    kubernetes.io/service-name: s%d\naddressType: IPv4\nports:\n- name: p\n  port: 8080\nendpoints:\n- addresses: [%s]\n---\n", i, i, ip)
		}
		return []byte(sb.String())
	}
	before, after := file(-1), file(5000)
	d := newDecoder()
	_, known, err := d.decode("f.yaml", before, nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		known bool
	}{{"from-scratch", false}, {"known-documents", true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				k := known
				if !tc.known {
					k = nil
				}
				if _, _, err := d.decode("f.yaml", after, k); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
