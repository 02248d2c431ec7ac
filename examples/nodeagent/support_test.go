package main

import (
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/examples/nodeagent/internal/kpconfig"
	"github.com/spf13/pflag"
	v1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
)

// TestKubeProxyFlagTable: the table lists exactly the kube-proxy flags
// the agent defines, and the agent defines no other flag than those and
// its own.
func TestKubeProxyFlagTable(t *testing.T) {
	o := &options{cfg: kpconfig.New()}
	var from string
	fs := newFlagSet(o, &from, io.Discard)
	var defined []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.Contains(agentFlags, f.Name) {
			defined = append(defined, f.Name)
		}
	})
	var listed []string
	for _, r := range kubeProxyFlags {
		listed = append(listed, r.name)
	}
	slices.Sort(defined)
	if diff := cmp.Diff(defined, listed); diff != "" {
		t.Errorf("kube-proxy flags (-defined +README table):\n%s", diff)
	}
}

// jsonPaths returns the fields of a struct type by their JSON paths, a
// struct field's own fields under its name; logging's options are one.
func jsonPaths(typ reflect.Type, prefix string) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || name == "" || name == "-" {
			continue
		}
		path := prefix + name
		if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() != "k8s.io/apimachinery/pkg/apis/meta/v1" && path != "logging.options" && path != "logging.flushFrequency" {
			out = append(out, jsonPaths(f.Type, path+".")...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// TestConfigFieldTable: the table lists every field of
// KubeProxyConfiguration v1alpha1.
func TestConfigFieldTable(t *testing.T) {
	fields := jsonPaths(reflect.TypeFor[v1alpha1.KubeProxyConfiguration](), "")
	slices.Sort(fields)
	var listed []string
	for _, r := range configFields {
		listed = append(listed, r.name)
	}
	if diff := cmp.Diff(fields, listed); diff != "" {
		t.Errorf("KubeProxyConfiguration fields (-type +README table):\n%s", diff)
	}
}

// TestREADMETables: README.md shows both tables as the code has them.
// NODEAGENT_WRITE_TABLES=1 rewrites them there.
func TestREADMETables(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	for _, tb := range []struct{ marker, table string }{
		{"kube-proxy flags", supportTable("flag", kubeProxyFlags, "--")},
		{"KubeProxyConfiguration fields", supportTable("field", configFields, "")},
	} {
		begin, end := "<!-- BEGIN "+tb.marker+" -->\n", "<!-- END "+tb.marker+" -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			t.Fatalf("README.md lacks %q ... %q", begin, end)
		}
		if got := text[i+len(begin) : j]; got != tb.table {
			if os.Getenv("NODEAGENT_WRITE_TABLES") == "" {
				t.Errorf("README.md's table of %s differs from the code's (NODEAGENT_WRITE_TABLES=1 go test -run TestREADMETables rewrites it):\n%s", tb.marker, cmp.Diff(got, tb.table))
			}
			text = text[:i+len(begin)] + tb.table + text[j:]
		}
	}
	if os.Getenv("NODEAGENT_WRITE_TABLES") != "" {
		if err := os.WriteFile("README.md", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
