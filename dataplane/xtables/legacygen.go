package xtables

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// The kernel's summary of a legacy table (linux/netfilter_ipv4/ip_tables.h
// and netfilter_ipv6/ip6_tables.h), which iptables-legacy reads first of
// all: getsockopt IPT_SO_GET_INFO (IP6T_SO_GET_INFO, the same number) on
// a raw socket gives struct ipt_getinfo, the table's name followed by
// valid_hooks, hook_entry[5], underflow[5], num_entries and size, all
// unsigned ints. Every rule added, deleted or flushed moves the entry
// count, the size or a hook's offset; no counter is in it.
const (
	soGetInfo    = 64
	tableNameLen = 32
	getInfoLen   = tableNameLen + 4*(1+5+5+1+1)
)

// legacyGeneration returns how to fingerprint the legacy tables of family
// in the calling thread's network namespace, for a canary to compare as
// it compares the nftables ruleset generation: the summary of every
// loaded table, hashed. The tables are those the kernel lists
// (/proc/net/ip_tables_names): asking for another would load its module
// and hook a table into every packet's path. A rule replaced by one of
// the same size leaves the fingerprint alone; the periodic Reconcile
// finds that.
func legacyGeneration(family v1.IPFamily) func(context.Context) (uint32, error) {
	af, level, names := unix.AF_INET, unix.SOL_IP, "ip_tables_names"
	if family == v1.IPv6Protocol {
		af, level, names = unix.AF_INET6, unix.SOL_IPV6, "ip6_tables_names"
	}
	return func(ctx context.Context) (uint32, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		// thread-self: the caller may have entered a network namespace
		// on its locked thread alone.
		list, err := os.ReadFile("/proc/thread-self/net/" + names)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("legacy tables: %w", err)
		}
		tables := strings.Fields(string(list))
		slices.Sort(tables)
		h := fnv.New32a()
		if len(tables) == 0 {
			return h.Sum32(), nil
		}
		fd, err := unix.Socket(af, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return 0, fmt.Errorf("legacy tables: %w", err)
		}
		defer unix.Close(fd)
		var info [getInfoLen]byte
		for _, t := range tables {
			clear(info[:])
			copy(info[:tableNameLen-1], t)
			n := uint32(len(info))
			_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soGetInfo,
				uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&n)), 0)
			switch {
			case errno == unix.ENOENT:
				// Gone since the listing: as if not listed.
				continue
			case errno != 0:
				return 0, fmt.Errorf("legacy tables: summary of table %s: %w", t, errno)
			}
			h.Write(info[:])
		}
		return h.Sum32(), nil
	}
}
