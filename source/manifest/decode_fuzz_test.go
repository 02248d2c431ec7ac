package manifest

import (
	"bytes"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// FuzzDecode checks that no input panics the decoder, that what it
// returns is only the supported kinds, and that every error is a
// *Error pointing inside the file.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(svcYAML + "---\n" + sliceYAML + "---\n" + nodeYAML))
	f.Add([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}}{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}`))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Service\n  metadata:\n    name: a\n"))
	f.Add([]byte("---\n---\n# nothing\n"))
	f.Add([]byte("kind: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Decode("f.yaml", data)
		if err != nil {
			var me *Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *Error", err)
			}
			if lines := bytes.Count(data, []byte("\n")) + 1; me.Line < 0 || me.Line > lines {
				t.Fatalf("error line %d outside the file's %d lines: %v", me.Line, lines, err)
			}
			return
		}
		for _, o := range objs {
			switch o.(type) {
			case *v1.Service, *discovery.EndpointSlice, *v1.Node:
			default:
				t.Fatalf("decoded a %T", o)
			}
		}
	})
}
