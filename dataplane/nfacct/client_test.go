package nfacct

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mdlayher/netlink"
	"github.com/mdlayher/netlink/nltest"
	"golang.org/x/sys/unix"
)

// reply is the kernel's answer to a GET of counter c.
func reply(req netlink.Message, c Counter) netlink.Message {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.String(attrName, c.Name)
	ae.Uint64(attrPackets, c.Packets)
	ae.Uint64(attrBytes, c.Bytes)
	ae.Uint32(4, 1) // NFACCT_USE, which Get skips
	attrs, err := ae.Encode()
	if err != nil {
		panic(err)
	}
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(unix.NFNL_SUBSYS_ACCT<<8 | msgNew), Sequence: req.Header.Sequence, PID: req.Header.PID},
		Data:   append(append([]byte{}, nfgenHeader...), attrs...),
	}
}

// kernel is a fake nfnetlink_acct answering on an nltest connection: it
// records each request's type, flags and counter name.
type kernel struct {
	counters map[string]Counter
	// errno, if set, answers every request.
	errno int
	seen  []string
}

func (k *kernel) answer(reqs []netlink.Message) ([]netlink.Message, error) {
	req := reqs[0]
	ad, err := netlink.NewAttributeDecoder(req.Data[len(nfgenHeader):])
	if err != nil {
		return nil, err
	}
	var name string
	for ad.Next() {
		if ad.Type() == attrName {
			name = ad.String()
		}
	}
	typ := int(req.Header.Type) &^ (unix.NFNL_SUBSYS_ACCT << 8)
	k.seen = append(k.seen, req.Header.Flags.String()+" "+map[int]string{msgNew: "new", msgGet: "get"}[typ]+" "+name)
	if k.errno != 0 {
		return answerErrno(k.errno, req), nil
	}
	if typ == msgGet {
		var out []netlink.Message
		for _, n := range slices.Sorted(maps.Keys(k.counters)) {
			m := reply(req, k.counters[n])
			m.Header.Flags |= netlink.Multi
			out = append(out, m)
		}
		done := netlink.Message{Header: netlink.Header{Type: netlink.Done, Flags: netlink.Multi, Sequence: req.Header.Sequence, PID: req.Header.PID}}
		return append(out, done), nil
	}
	if _, ok := k.counters[name]; ok {
		return answerErrno(int(unix.EBUSY), req), nil
	}
	k.counters[name] = Counter{Name: name}
	return answerErrno(0, req), nil
}

// answerErrno is the kernel's error (or, for 0, acknowledgement) message:
// the negated errno, then the request's header and payload.
func answerErrno(errno int, req netlink.Message) []netlink.Message {
	hdr := make([]byte, 16)
	binary.NativeEndian.PutUint16(hdr[4:], uint16(req.Header.Type))
	binary.NativeEndian.PutUint32(hdr[8:], req.Header.Sequence)
	data := binary.NativeEndian.AppendUint32(nil, uint32(-int32(errno)))
	return []netlink.Message{{
		Header: netlink.Header{Type: netlink.Error, Sequence: req.Header.Sequence, PID: req.Header.PID},
		Data:   append(append(data, hdr...), req.Data...),
	}}
}

func TestClient(t *testing.T) {
	ctx := context.Background()
	k := &kernel{counters: map[string]Counter{
		"counted": {Name: "counted", Packets: 7, Bytes: 420},
		"other":   {Name: "other", Packets: 1, Bytes: 1},
	}}
	c := &Client{conn: nltest.Dial(k.answer)}
	defer c.Close()

	got, err := c.Get(ctx, "counted")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Counter{Name: "counted", Packets: 7, Bytes: 420}, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if _, err := c.Get(ctx, "absent"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Get of a missing counter: %v, want ErrNotExist", err)
	}
	for range 2 {
		if err := c.Ensure(ctx, "made"); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	if err := c.Ensure(ctx, "counted"); err != nil {
		t.Fatalf("Ensure of an existing counter: %v", err)
	}
	if diff := cmp.Diff(Counter{Name: "counted", Packets: 7, Bytes: 420}, k.counters["counted"]); diff != "" {
		t.Errorf("Ensure changed an existing counter (-want +got):\n%s", diff)
	}
	want := []string{
		"request|0x300 get ",
		"request|0x300 get ",
		"request|acknowledge|0x400 new made",
		"request|acknowledge|0x400 new made",
		"request|acknowledge|0x400 new counted",
	}
	if diff := cmp.Diff(want, k.seen); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
}

// TestClientNotSupported: nfnetlink's answer for a subsystem it lacks is
// ErrNotSupported; other errors are not.
func TestClientNotSupported(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		errno       unix.Errno
		unsupported bool
	}{
		{unix.EINVAL, true},
		{unix.EOPNOTSUPP, true},
		{unix.EPERM, false},
	} {
		k := &kernel{errno: int(tc.errno)}
		c := &Client{conn: nltest.Dial(k.answer)}
		errs := []error{c.Ensure(ctx, "x")}
		_, err := c.Get(ctx, "x")
		errs = append(errs, err)
		for _, err := range errs {
			if err == nil || errors.Is(err, ErrNotSupported) != tc.unsupported || !errors.Is(err, tc.errno) {
				t.Errorf("errno %v: got %v, want ErrNotSupported %v wrapping the errno", tc.errno, err, tc.unsupported)
			}
		}
		c.Close()
	}
}

func TestNames(t *testing.T) {
	ctx := context.Background()
	c := &Client{conn: nltest.Dial(func([]netlink.Message) ([]netlink.Message, error) {
		t.Error("a bad name reached the kernel")
		return nil, nil
	})}
	defer c.Close()
	for _, name := range []string{"", "a234567890123456789012345678901x", "a\x00b"} {
		if err := c.Ensure(ctx, name); err == nil {
			t.Errorf("Ensure(%q) succeeded", name)
		}
		if _, err := c.Get(ctx, name); err == nil {
			t.Errorf("Get(%q) succeeded", name)
		}
		if err := new(Fake).Ensure(ctx, name); err == nil {
			t.Errorf("Fake.Ensure(%q) succeeded", name)
		}
	}
}

func TestDecode(t *testing.T) {
	req := netlink.Message{}
	m := reply(req, Counter{Name: "n", Packets: 1 << 40, Bytes: 3})
	got, err := decode(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Counter{Name: "n", Packets: 1 << 40, Bytes: 3}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range [][]byte{nil, {0, 0}, append(append([]byte{}, nfgenHeader...), 8, 0, 1, 0, 'n', 0, 0, 0)} {
		if _, err := decode(bad); err == nil {
			t.Errorf("decode(%v) succeeded", bad)
		}
	}
}
