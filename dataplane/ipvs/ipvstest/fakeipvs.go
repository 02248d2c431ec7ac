package ipvstest

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	mobyipvs "github.com/moby/ipvs"
	"github.com/proxykit/proxykit/dataplane/ipvs/internal/handle"
	"golang.org/x/sys/unix"
)

// FakeIPVS is an in-memory IPVS table, a Kernel's, for tests of the
// dataplane and of programs that embed it. It answers as the kernel does:
// adding a virtual or real server that exists fails with EEXIST, changing
// or deleting one that does not with ESRCH (virtual servers) or ENOENT
// (real servers), and GetServices and GetDestinations return copies. It
// counts every call (Calls), each of which would be one netlink round
// trip, keeps connection counts a test sets (SetConnections) so that
// graceful termination can be exercised, and fails a call on request
// (FailNext). It is safe for concurrent use.
type FakeIPVS struct {
	mu       sync.Mutex
	services map[fakeVSKey]*fakeVS
	calls    int
	config   mobyipvs.Config
	// fail is what the next call returns, if set (FailNext).
	fail error
	// table is the buffer procTable lists the table into, as it was at
	// tableOf, the version: every change counts one more.
	table            []byte
	version, tableOf int
}

type fakeVSKey struct {
	addr  netip.Addr
	proto uint16
	port  uint16
}

type fakeVS struct {
	svc   mobyipvs.Service
	dests []fakeDest
}

// fakeDest is a real server as the fake keeps it: what a caller gave it
// is never kept, as the kernel copies a netlink message.
type fakeDest struct {
	addr             addrPort
	weight           int32
	flags            uint32
	upper, lower     uint32
	active, inactive int32
}

func destOf(d *mobyipvs.Destination) addrPort {
	a, _ := netip.AddrFromSlice(d.Address)
	return compact(netip.AddrPortFrom(a.Unmap(), d.Port))
}

// addrPort is a netip.AddrPort without the pointer a netip.Addr holds
// for its zone, so that the fakes' hundreds of thousands of real servers
// and set members are nothing for the garbage collector to scan.
type addrPort struct {
	ip   [16]byte
	port uint16
}

func compact(ap netip.AddrPort) addrPort { return addrPort{ap.Addr().As16(), ap.Port()} }

func (a addrPort) AddrPort() netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16(a.ip).Unmap(), a.port)
}

// destination returns a copy of d as moby/ipvs lists it.
func (d *fakeDest) destination() *mobyipvs.Destination {
	n := &struct {
		mobyipvs.Destination
		ip [16]byte
	}{}
	ap := d.addr.AddrPort()
	a := ap.Addr()
	ip := n.ip[:]
	if a.Is4() {
		v := a.As4()
		copy(n.ip[:4], v[:])
		ip = n.ip[:4]
	} else {
		n.ip = a.As16()
	}
	n.Destination = mobyipvs.Destination{Address: ip, Port: ap.Port(), Weight: int(d.weight),
		ConnectionFlags: d.flags, UpperThreshold: d.upper, LowerThreshold: d.lower,
		ActiveConnections: int(d.active), InactiveConnections: int(d.inactive)}
	return &n.Destination
}

// NewFakeIPVS returns an empty FakeIPVS.
func NewFakeIPVS() *FakeIPVS {
	return &FakeIPVS{services: map[fakeVSKey]*fakeVS{}}
}

func keyOf(s *mobyipvs.Service) fakeVSKey {
	a, _ := netip.AddrFromSlice(s.Address)
	return fakeVSKey{a.Unmap(), s.Protocol, s.Port}
}

// begin locks f (the caller unlocks it) and counts a call; it returns
// the failure FailNext asked for, once.
func (f *FakeIPVS) begin() error {
	f.mu.Lock()
	f.calls++
	err := f.fail
	f.fail = nil
	return err
}

// FailNext makes the next call, whichever it is, fail with err and
// change nothing, as a kernel refusing a netlink message would: a test of
// what a caller does after a failed sync injects it so.
func (f *FakeIPVS) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// call begins a call and finds the virtual server of s.
func (f *FakeIPVS) call(s *mobyipvs.Service) (*fakeVS, error) {
	if err := f.begin(); err != nil {
		return nil, err
	}
	vs, ok := f.services[keyOf(s)]
	if !ok {
		return nil, unix.ESRCH
	}
	return vs, nil
}

// Calls returns how many calls the fake has answered.
func (f *FakeIPVS) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// GetServices implements the dataplane's IPVS handle.
func (f *FakeIPVS) GetServices() ([]*mobyipvs.Service, error) {
	err := f.begin()
	defer f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]*mobyipvs.Service, 0, len(f.services))
	for _, vs := range f.services {
		s := vs.svc
		s.Flags |= handle.FlagHashed
		out = append(out, &s)
	}
	slices.SortFunc(out, func(a, b *mobyipvs.Service) int { return compareKeys(keyOf(a), keyOf(b)) })
	return out, nil
}

// NewService implements the dataplane's IPVS handle.
func (f *FakeIPVS) NewService(s *mobyipvs.Service) error {
	err := f.begin()
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	k := keyOf(s)
	if _, ok := f.services[k]; ok {
		return unix.EEXIST
	}
	f.services[k] = &fakeVS{svc: copyService(s)}
	f.version++
	return nil
}

// UpdateService implements the dataplane's IPVS handle.
func (f *FakeIPVS) UpdateService(s *mobyipvs.Service) error {
	vs, err := f.call(s)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	vs.svc = copyService(s)
	f.version++
	return nil
}

// DelService implements the dataplane's IPVS handle.
func (f *FakeIPVS) DelService(s *mobyipvs.Service) error {
	err := f.begin()
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	k := keyOf(s)
	if _, ok := f.services[k]; !ok {
		return unix.ESRCH
	}
	delete(f.services, k)
	f.version++
	return nil
}

// GetDestinations implements the dataplane's IPVS handle.
func (f *FakeIPVS) GetDestinations(s *mobyipvs.Service) ([]*mobyipvs.Destination, error) {
	vs, err := f.call(s)
	defer f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	out := make([]*mobyipvs.Destination, len(vs.dests))
	for i := range vs.dests {
		out[i] = vs.dests[i].destination()
	}
	return out, nil
}

// NewDestination implements the dataplane's IPVS handle.
func (f *FakeIPVS) NewDestination(s *mobyipvs.Service, d *mobyipvs.Destination) error {
	vs, err := f.call(s)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	ap := destOf(d)
	if slices.ContainsFunc(vs.dests, func(o fakeDest) bool { return o.addr == ap }) {
		return unix.EEXIST
	}
	vs.dests = append(vs.dests, fakeDest{addr: ap, weight: int32(d.Weight), flags: d.ConnectionFlags, upper: d.UpperThreshold, lower: d.LowerThreshold})
	f.version++
	return nil
}

// UpdateDestination implements the dataplane's IPVS handle.
func (f *FakeIPVS) UpdateDestination(s *mobyipvs.Service, d *mobyipvs.Destination) error {
	vs, err := f.call(s)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	ap := destOf(d)
	for i := range vs.dests {
		if o := &vs.dests[i]; o.addr == ap {
			o.weight, o.flags, o.upper, o.lower = int32(d.Weight), d.ConnectionFlags, d.UpperThreshold, d.LowerThreshold
			f.version++
			return nil
		}
	}
	return unix.ENOENT
}

// DelDestination implements the dataplane's IPVS handle.
func (f *FakeIPVS) DelDestination(s *mobyipvs.Service, d *mobyipvs.Destination) error {
	vs, err := f.call(s)
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	ap := destOf(d)
	i := slices.IndexFunc(vs.dests, func(o fakeDest) bool { return o.addr == ap })
	if i < 0 {
		return unix.ENOENT
	}
	vs.dests = slices.Delete(vs.dests, i, i+1)
	f.version++
	return nil
}

// SetConfig implements IPVS; zero fields keep their value, as in the
// kernel.
func (f *FakeIPVS) SetConfig(c *mobyipvs.Config) error {
	err := f.begin()
	defer f.mu.Unlock()
	if err != nil {
		return err
	}
	if c.TimeoutTCP != 0 {
		f.config.TimeoutTCP = c.TimeoutTCP
	}
	if c.TimeoutTCPFin != 0 {
		f.config.TimeoutTCPFin = c.TimeoutTCPFin
	}
	if c.TimeoutUDP != 0 {
		f.config.TimeoutUDP = c.TimeoutUDP
	}
	return nil
}

// Config returns the timeouts SetConfig set.
func (f *FakeIPVS) Config() mobyipvs.Config {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.config
}

// SetConnections sets the active and inactive connection counts of the
// real server dest of the virtual server at vip with protocol proto
// ("TCP", "UDP", "SCTP"), as traffic would; it reports whether both
// exist. It is not a call of IPVS and is not counted.
func (f *FakeIPVS) SetConnections(vip netip.AddrPort, proto string, dest netip.AddrPort, active, inactive int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	vs, ok := f.services[fakeVSKey{vip.Addr(), handle.ProtoNumber(proto), vip.Port()}]
	if !ok {
		return false
	}
	for i := range vs.dests {
		if d := &vs.dests[i]; d.addr == compact(dest) {
			d.active, d.inactive = int32(active), int32(inactive)
			f.version++
			return true
		}
	}
	return false
}

// Dump returns the table as ipvsadm -Ln would list it, sorted, one line
// per virtual server ("TCP 10.0.0.1:80 rr") followed by one per real
// server ("  -> 10.1.0.1:8080 weight 1"). It is not counted.
func (f *FakeIPVS) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var lines []string
	for _, vs := range f.services {
		s := &vs.svc
		line := serviceString(s) + " " + s.SchedName
		if s.Flags&handle.FlagPersistent != 0 {
			line += fmt.Sprintf(" persistent %d", s.Timeout)
		}
		if extra := s.Flags &^ handle.FlagPersistent; extra != 0 {
			line += fmt.Sprintf(" flags %#x", extra)
		}
		var dests []string
		for _, d := range vs.dests {
			dests = append(dests, fmt.Sprintf("  -> %s weight %d", d.addr.AddrPort(), d.weight))
		}
		slices.Sort(dests)
		lines = append(lines, strings.Join(append([]string{line}, dests...), "\n"))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func compareKeys(a, b fakeVSKey) int {
	if c := a.addr.Compare(b.addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

// procTable hands scan the table as the kernel's /proc/net/ip_vs does: a
// header, then each virtual server ("TCP  0A600001:0050 rr ", IPv6
// addresses bracketed, with "persistent TIMEOUT NETMASK" when it is) and
// its real servers ("  -> 0A010001:1F90      Masq    1      0          0",
// forwarding method, weight and connection counters), in no particular
// order. It is not counted.
func (f *FakeIPVS) procTable(scan func([]byte)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// The last listing, as long as nothing changed.
	if f.tableOf == f.version && f.table != nil {
		scan(f.table)
		return
	}
	b := f.table[:0]
	defer func() { scan(b); f.table, f.tableOf = b, f.version }()
	b = append(b, "IP Virtual Server version 1.2.1 (size=4096)\nProt LocalAddress:Port Scheduler Flags\n  -> RemoteAddress:Port Forward Weight ActiveConn InActConn\n"...)
	for _, vs := range f.services {
		s := &vs.svc
		b = append(b, handle.ProtoName(s.Protocol)...)
		b = append(b, "  "...)
		a, _ := netip.AddrFromSlice(s.Address)
		b = appendHexAddrPort(b, a.Unmap(), s.Port)
		b = append(b, ' ')
		b = append(b, s.SchedName...)
		b = append(b, ' ')
		if s.Flags&handle.FlagPersistent != 0 {
			b = append(b, "persistent "...)
			b = strconv.AppendUint(b, uint64(s.Timeout), 10)
			b = append(b, ' ')
			b = appendHex(b, uint64(s.Netmask), 8)
		}
		b = append(b, '\n')
		for _, d := range vs.dests {
			b = append(b, "  -> "...)
			ap := d.addr.AddrPort()
			b = appendHexAddrPort(b, ap.Addr(), ap.Port())
			b = append(b, "      "...)
			b = appendPadded(b, fwdName(d.flags), 8)
			b = appendPaddedInt(b, int(d.weight), 7)
			b = appendPaddedInt(b, int(d.active), 11)
			b = strconv.AppendInt(b, int64(d.inactive), 10)
			b = append(b, '\n')
		}
	}
}

// fwdName is the kernel's name of a forwarding method.
func fwdName(flags uint32) string {
	switch flags & mobyipvs.ConnectionFlagFwdMask {
	case mobyipvs.ConnectionFlagLocalNode:
		return "Local"
	case mobyipvs.ConnectionFlagTunnel:
		return "Tunnel"
	case mobyipvs.ConnectionFlagDirectRoute:
		return "Route"
	}
	return "Masq"
}

// appendHexAddrPort writes "0A600001:0050", or "[fd00:0000:…:000a]:0050"
// for an IPv6 address.
func appendHexAddrPort(b []byte, a netip.Addr, port uint16) []byte {
	if a.Is4() {
		v := a.As4()
		b = appendHex(b, uint64(v[0])<<24|uint64(v[1])<<16|uint64(v[2])<<8|uint64(v[3]), 8)
	} else {
		v := a.As16()
		b = append(b, '[')
		for i := 0; i < 16; i += 2 {
			if i > 0 {
				b = append(b, ':')
			}
			b = appendLowerHex(b, uint64(v[i])<<8|uint64(v[i+1]), 4)
		}
		b = append(b, ']')
	}
	b = append(b, ':')
	return appendHex(b, uint64(port), 4)
}

func appendHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789ABCDEF"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*i)&0xf])
	}
	return b
}

func appendLowerHex(b []byte, v uint64, width int) []byte {
	const digits = "0123456789abcdef"
	for i := width - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*i)&0xf])
	}
	return b
}

func appendPaddedInt(b []byte, v, width int) []byte {
	n := len(b)
	b = strconv.AppendInt(b, int64(v), 10)
	for range width - (len(b) - n) {
		b = append(b, ' ')
	}
	return b
}

func appendPadded(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for range width - len(s) {
		b = append(b, ' ')
	}
	return b
}

func copyService(s *mobyipvs.Service) mobyipvs.Service {
	c := *s
	c.Address = slices.Clone(s.Address)
	c.Flags &^= handle.FlagHashed
	return c
}

func serviceString(s *mobyipvs.Service) string {
	a, _ := netip.AddrFromSlice(s.Address)
	return handle.ProtoName(s.Protocol) + " " + netip.AddrPortFrom(a.Unmap(), s.Port).String()
}
