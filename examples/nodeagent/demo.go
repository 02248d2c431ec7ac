package main

import (
	"embed"
	"fmt"
	"io/fs"

	"github.com/proxykit/proxykit/source/manifest"
	"k8s.io/apimachinery/pkg/runtime"
)

// demoNodeName is the Node in the demo manifests that the agent runs as.
const demoNodeName = "demo-node"

//go:embed demo/*.yaml
var demoFS embed.FS

// demoObjects decodes the bundled demo manifests, in file name order.
func demoObjects() ([]runtime.Object, error) {
	names, err := fs.Glob(demoFS, "demo/*.yaml")
	if err != nil {
		return nil, err
	}
	var objs []runtime.Object
	for _, name := range names {
		data, err := demoFS.ReadFile(name)
		if err != nil {
			return nil, err
		}
		o, err := manifest.Decode(name, data)
		if err != nil {
			return nil, fmt.Errorf("demo manifests: %w", err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}
