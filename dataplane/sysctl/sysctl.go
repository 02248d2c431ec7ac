package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Interface reads and writes sysctls by their name under /proc/sys, with
// slashes ("net/ipv4/conf/all/route_localnet").
type Interface interface {
	// Get returns the setting's value, without the trailing newline.
	Get(name string) (string, error)
	// Set writes value.
	Set(name, value string) error
}

// ErrNotExist is wrapped by the error of Get and Set for a setting the
// kernel does not have (a module not loaded, a namespace without it).
var ErrNotExist = fs.ErrNotExist

// Proc is the Interface of a real kernel.
type Proc struct {
	// Root is the sysctl tree; "" means /proc/sys.
	Root string
}

func (p Proc) path(name string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("sysctl %q: invalid name", name)
	}
	root := p.Root
	if root == "" {
		root = "/proc/sys"
	}
	return filepath.Join(root, name), nil
}

// Get implements Interface.
func (p Proc) Get(name string) (string, error) {
	path, err := p.path(name)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Set implements Interface.
func (p Proc) Set(name, value string) error {
	path, err := p.path(name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
		return fmt.Errorf("sysctl %s: %w", name, err)
	}
	return nil
}

// Fake is an in-memory Interface; safe for concurrent use. Its zero value
// has no settings: Get of a setting never Set fails with ErrNotExist.
type Fake struct {
	mu     sync.Mutex
	values map[string]string
}

// NewFake returns a Fake holding values (copied).
func NewFake(values map[string]string) *Fake {
	f := &Fake{values: map[string]string{}}
	for k, v := range values {
		f.values[k] = v
	}
	return f
}

// Get implements Interface.
func (f *Fake) Get(name string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.values[name]
	if !ok {
		return "", fmt.Errorf("sysctl %s: %w", name, ErrNotExist)
	}
	return v, nil
}

// Set implements Interface.
func (f *Fake) Set(name, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.values == nil {
		f.values = map[string]string{}
	}
	f.values[name] = value
	return nil
}

// IsNotExist reports whether err says a setting does not exist.
func IsNotExist(err error) bool { return errors.Is(err, ErrNotExist) }
