package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Locks are flock(2)s on cgroup directories of the first hierarchy: the
// kernel drops them when their holder dies, so a killed run's cluster is
// told from a running one without any file left behind.
//
// The tree's lock (on proxykit-e2e itself) serializes making, reclaiming
// and removing clusters; each cluster's lock (on proxykit-e2e/<id>) is
// held from Up to Down.

// errBusy says a lock is held by a running cluster.
var errBusy = errors.New("held by a running cluster")

// lockTree takes the tree's lock, making the tree's directory in the first
// hierarchy if needed, and waits for a holder to let go.
func lockTree(ctx context.Context, hs []hierarchy) (unlock func(), err error) {
	dir := filepath.Join(hs[0].Mount, cgroupTree)
	for {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("cluster: cgroup %s: %w", dir, err)
		}
		f, err := os.Open(dir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed meanwhile by the last Down
			}
			return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			// The directory may have been removed between open and lock.
			if same(f, dir) {
				return func() { f.Close() }, nil
			}
			f.Close()
			continue
		}
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
		}
	}
}

// same reports whether f is still the directory at path.
func same(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// lockCluster takes cluster id's lock without waiting; errBusy if its
// cluster runs. A cluster whose directory in the first hierarchy is gone
// cannot be running: it gets an unlocked placeholder.
func lockCluster(hs []hierarchy, id string) (*os.File, error) {
	dir := filepath.Join(hs[0].Mount, cgroupTree, id)
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return os.Open(os.DevNull)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errBusy
		}
		return nil, fmt.Errorf("cluster: lock %s: %w", dir, err)
	}
	return f, nil
}

// removeTreeIfEmpty removes the tree's directory from every hierarchy once
// no cluster is left in any. The caller holds the tree's lock.
func removeTreeIfEmpty(hs []hierarchy) error {
	for _, h := range hs {
		entries, _ := os.ReadDir(filepath.Join(h.Mount, cgroupTree))
		for _, e := range entries {
			if e.IsDir() {
				return nil
			}
		}
	}
	var errs []error
	for _, h := range hs {
		dir := filepath.Join(h.Mount, cgroupTree)
		if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("cluster: remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}
