package manifest_test

import (
	"fmt"

	"github.com/proxykit/proxykit/source/manifest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// An object the API server would refuse is left out, and named with its
// line and the API server's own error; the rest of the file is decoded.
func ExampleDecode_refused() {
	objs, err := manifest.Decode("web.yaml", []byte(`apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 172.30.0.10
  ports:
  - port: 80
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
endpoints:
- addresses: [169.254.169.254]
`))
	fmt.Println(len(objs), apierrors.IsInvalid(err))
	fmt.Println(err)
	// Output:
	// 1 true
	// web.yaml:10: EndpointSlice.discovery.k8s.io "web-1" is invalid: endpoints[0].addresses[0]: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)
}
