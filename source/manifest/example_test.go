package manifest_test

import (
	"fmt"

	"github.com/proxykit/proxykit/source/manifest"
	v1 "k8s.io/api/core/v1"
)

// Decode returns the objects of a manifest as the API server would store
// them, defaults applied (namespace, port protocol, target port, ...); an
// error names the file and line.
func Example() {
	objs, err := manifest.Decode("web.yaml", []byte(`apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 172.30.0.10
  ports:
  - port: 80
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := objs[0].(*v1.Service)
	port := svc.Spec.Ports[0]
	fmt.Println(svc.Namespace+"/"+svc.Name, svc.Spec.Type, port.Port, port.Protocol, "->", port.TargetPort.String())

	_, err = manifest.Decode("broken.yaml", []byte("kind: Service\nspec: [\n"))
	fmt.Println(err != nil)
	// Output:
	// default/web ClusterIP 80 TCP -> 80
	// true
}
