package proxykit_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/proxykit/proxykit"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
)

const demo = `apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: demo
spec:
  clusterIP: 172.30.0.10
  clusterIPs: [172.30.0.10]
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: demo
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: [10.0.0.2]
  nodeName: node-1
- addresses: [10.0.0.1]
  nodeName: node-2
---
apiVersion: v1
kind: Node
metadata:
  name: node-1
status:
  addresses:
  - type: InternalIP
    address: 192.168.0.1
`

// A proxy reads a manifest file, programs it once into a recording
// dataplane (as a node agent's --once would into a real one) and shows what
// it programmed.
func Example() {
	dir, err := os.MkdirTemp("", "proxykit-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "demo.yaml")
	if err := os.WriteFile(path, []byte(demo), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	rec := dataplanetest.NewRecorder("dry-run")
	p, err := proxykit.New(proxykit.Config{
		NodeName:   "node-1",
		Dataplanes: []proxykit.DataplaneConfig{{Family: v1.IPv4Protocol, Dataplane: rec}},
		Sources:    []source.Source{manifest.New(path, manifest.Config{})},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := p.RunOnce(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	st := rec.Programmed()
	fmt.Println("node", st.Node.Name, st.Node.IPs)
	var lines []string
	for port := range st.Services.All() {
		line := fmt.Sprintf("%s %s ->", port.Name, port)
		for _, ep := range st.Endpoints.Get(port.Name) {
			line += fmt.Sprintf(" %s (local %v)", ep, ep.Local)
		}
		lines = append(lines, line)
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// node node-1 [192.168.0.1]
	// demo/web:http 172.30.0.10:80/TCP -> 10.0.0.1:8080 (local false) 10.0.0.2:8080 (local true)
}
