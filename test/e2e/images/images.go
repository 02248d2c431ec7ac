package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/proxykit/proxykit/test/e2e/build"
)

// The references the suite pulls (k8s.io/kubernetes v1.37.2,
// test/utils/image/manifest.go) for the tests the fixture runs.
const (
	Pause                = "registry.k8s.io/pause:3.10.2"
	Agnhost              = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	BusyBox              = "registry.k8s.io/e2e-test-images/busybox:1.37.0-2"
	DistrolessIptables   = "registry.k8s.io/build-image/distroless-iptables:v0.9.9"
	RegressionIssue74839 = "registry.k8s.io/e2e-test-images/regression-issue-74839:1.5"
)

// image is one tarball to write.
type image struct {
	file       string // name in the output directory
	ref        string
	layers     []*layer
	entrypoint []string
	cmd        []string
}

// config is the part of the image config that the cache key covers
// besides the layers.
type config struct {
	Ref, OS, Arch        string
	Entrypoint, Cmd, Env []string
	Layers               []string
}

// Build writes an image tarball (in docker save's format, which `ctr -n
// k8s.io images import` reads) for each image the suite pulls into dir,
// or keeps the one there when its key (the config and every layer's
// uncompressed digest) is unchanged, and returns their paths. A lock in
// dir makes a concurrent run wait, then find the tarballs written.
func Build(ctx context.Context, dir string, bins build.Binaries) ([]string, error) {
	imgs, err := plan(ctx, bins)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	unlock, err := build.Lock(ctx, filepath.Join(dir, "lock"), nil)
	if err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	defer unlock()
	// What a killed run left half-written; no other run writes now.
	if stale, err := filepath.Glob(filepath.Join(dir, "*.tmp")); err == nil {
		for _, p := range stale {
			_ = os.Remove(p)
		}
	}
	compressed := map[*layer]v1.Layer{}
	var paths []string
	for _, img := range imgs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := filepath.Join(dir, img.file)
		if err := writeIfChanged(p, img, compressed); err != nil {
			return nil, fmt.Errorf("image %s: %w", img.ref, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// plan builds the layers in memory and lists the images. agnhost's
// shell-snippet tools go in a layer of their own, shared by every image
// but pause, so that busybox and distroless-iptables cost nothing more.
func plan(ctx context.Context, bins build.Binaries) ([]image, error) {
	for _, b := range []struct{ field, path string }{
		{"Pause", bins.Pause}, {"Agnhost", bins.Agnhost}, {"RegressionIssue74839", bins.RegressionIssue74839},
	} {
		if b.path == "" {
			return nil, fmt.Errorf("images: build.Binaries.%s is empty", b.field)
		}
	}
	files, err := toolFiles(ctx, hostTools())
	if err != nil {
		return nil, fmt.Errorf("images: tools layer: %w", err)
	}
	tools, err := newLayer(files)
	if err != nil {
		return nil, fmt.Errorf("images: tools layer: %w", err)
	}
	single := func(dst, src string, extra ...file) (*layer, error) {
		if _, err := os.Stat(src); err != nil {
			return nil, fmt.Errorf("images: %w", err)
		}
		l, err := newLayer(append([]file{copyOf(dst, src, 0o755)}, extra...))
		if err != nil {
			return nil, fmt.Errorf("images: %s: %w", dst, err)
		}
		return l, nil
	}
	pause, err := single("/pause", bins.Pause)
	if err != nil {
		return nil, err
	}
	agnhost, err := single("/agnhost", bins.Agnhost, directory("/uploads", 0o755))
	if err != nil {
		return nil, err
	}
	boom, err := single("/regression-issue-74839", bins.RegressionIssue74839)
	if err != nil {
		return nil, err
	}
	return []image{
		{file: "pause.tar", ref: Pause, layers: []*layer{pause}, entrypoint: []string{"/pause"}},
		{file: "agnhost.tar", ref: Agnhost, layers: []*layer{tools, agnhost}, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}},
		{file: "busybox.tar", ref: BusyBox, layers: []*layer{tools}, cmd: []string{"sh"}},
		{file: "distroless-iptables.tar", ref: DistrolessIptables, layers: []*layer{tools}},
		{file: "regression-issue-74839.tar", ref: RegressionIssue74839, layers: []*layer{tools, boom}, entrypoint: []string{"/regression-issue-74839"}},
	}, nil
}

// envPath is the PATH of every image.
const envPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (img image) config() config {
	c := config{Ref: img.ref, OS: "linux", Arch: runtime.GOARCH, Entrypoint: img.entrypoint, Cmd: img.cmd, Env: []string{envPath}}
	for _, l := range img.layers {
		c.Layers = append(c.Layers, l.diffID)
	}
	return c
}

// key digests everything the tarball is made of.
func (c config) key() string {
	b, _ := json.Marshal(c)
	return fmt.Sprintf("sha256:%x\n", sha256.Sum256(b))
}

// writeIfChanged writes img to p unless p's key file says it holds the
// same inputs. Both go through a temporary name, the key last, so that an
// interrupted write is redone.
func writeIfChanged(p string, img image, compressed map[*layer]v1.Layer) error {
	c := img.config()
	key := c.key()
	if old, err := os.ReadFile(p + ".key"); err == nil && string(old) == key {
		if _, err := os.Stat(p); err == nil {
			return nil
		}
	}
	v1img, err := assemble(img, c, compressed)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(img.ref)
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, v1img); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	if err := os.WriteFile(p+".key.tmp", []byte(key), 0o644); err != nil {
		return err
	}
	return os.Rename(p+".key.tmp", p+".key")
}

// assemble is empty.Image plus the layers, with the config; each layer is
// compressed once however many images share it.
func assemble(img image, c config, compressed map[*layer]v1.Layer) (v1.Image, error) {
	var layers []v1.Layer
	for _, l := range img.layers {
		cl, ok := compressed[l]
		if !ok {
			data := l.tar
			var err error
			cl, err = tarball.LayerFromOpener(func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(data)), nil
			}, tarball.WithCompressedCaching)
			if err != nil {
				return nil, err
			}
			compressed[l] = cl
		}
		layers = append(layers, cl)
	}
	v1img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := v1img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = c.OS, c.Arch
	cf.Config = v1.Config{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env}
	return mutate.ConfigFile(v1img, cf)
}
