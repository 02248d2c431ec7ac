package nfacct

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// MaxNameLen is the longest counter name the kernel keeps, in bytes (its
// buffer holds one more, for the terminating NUL).
const MaxNameLen = 31

// Counter is one named counter's totals.
type Counter struct {
	Name    string
	Packets uint64
	Bytes   uint64
}

// Interface creates and reads named counters.
type Interface interface {
	// Ensure creates counter name unless it exists; an existing
	// counter keeps its totals.
	Ensure(ctx context.Context, name string) error
	// Get returns counter name; an error wrapping ErrNotExist when
	// there is none.
	Get(ctx context.Context, name string) (Counter, error)
}

var (
	// ErrNotSupported is wrapped by every error of a kernel without
	// nfnetlink_acct (or without netfilter's netlink at all).
	ErrNotSupported = errors.New("nfacct not supported by the kernel")
	// ErrNotExist is wrapped by Get's error for a counter that does not
	// exist.
	ErrNotExist = fs.ErrNotExist
)

// checkName refuses a name the kernel would cut or misread.
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("nfacct: empty counter name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("nfacct: counter name %q longer than %d bytes", name, MaxNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("nfacct: counter name %q holds a NUL byte", name)
	}
	return nil
}

// Fake is an in-memory Interface; safe for concurrent use. Its zero value
// holds no counters and supports all calls.
type Fake struct {
	// Unsupported makes every call fail with ErrNotSupported, as on a
	// kernel without nfnetlink_acct. Set it before first use.
	Unsupported bool

	mu       sync.Mutex
	counters map[string]Counter
}

var _ Interface = (*Fake)(nil)

// Ensure implements Interface.
func (f *Fake) Ensure(_ context.Context, name string) error {
	if err := f.check(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.counters[name]; !ok {
		if f.counters == nil {
			f.counters = map[string]Counter{}
		}
		f.counters[name] = Counter{Name: name}
	}
	return nil
}

// Get implements Interface.
func (f *Fake) Get(_ context.Context, name string) (Counter, error) {
	if err := f.check(name); err != nil {
		return Counter{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.counters[name]
	if !ok {
		return Counter{}, fmt.Errorf("nfacct: counter %q: %w", name, ErrNotExist)
	}
	return c, nil
}

// Count adds packets and bytes to counter name, as matching rules would;
// it fails for a counter never ensured.
func (f *Fake) Count(name string, packets, bytes uint64) error {
	if err := f.check(name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.counters[name]
	if !ok {
		return fmt.Errorf("nfacct: counter %q: %w", name, ErrNotExist)
	}
	c.Packets += packets
	c.Bytes += bytes
	f.counters[name] = c
	return nil
}

func (f *Fake) check(name string) error {
	if f.Unsupported {
		return fmt.Errorf("nfacct: counter %q: %w", name, ErrNotSupported)
	}
	return checkName(name)
}
