package cluster

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// EchoPort is where serveEcho's pods echo every byte back, keeping the
// connection open.
const EchoPort = 8081

// serveEcho makes p echo on EchoPort until the test ends.
func serveEcho(t *testing.T, p *Pod) {
	t.Helper()
	var ln net.Listener
	err := p.NS.do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(p.IP, strconv.Itoa(EchoPort)))
		return err
	})
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
}

// Target is one address clients reach a service at, with the port of its
// echo server beside it.
type Target struct {
	Name, Addr, EchoAddr string
}

// Traffic is what a replacement is measured with: from every client, a
// new connection to every target every 100 ms (each must be answered with
// a pod's name) and a few long-lived connections to every target's echo
// address, each exchanging a byte every 250 ms.
type Traffic struct {
	made, failed atomic.Int64
	start        time.Time
	stop         chan struct{}
	wg           sync.WaitGroup

	mu       sync.Mutex
	failures []string // the first few, with when and what happened
	events   []string // what the test did, and when
	long     []*longConn
	// nodes and conntrack are the nodes' conntrack ids once the
	// long-lived connections were open.
	nodes     []*Node
	conntrack map[string]map[string]string
}

// longConn is one long-lived connection.
type longConn struct {
	name          string
	conn          net.Conn
	local, remote string
	exchanged     atomic.Int64
	err           atomic.Pointer[string]
}

const (
	newConnEvery = 100 * time.Millisecond
	echoEvery    = 250 * time.Millisecond
	connTimeout  = 3 * time.Second
	keptFailures = 20
)

// StartTraffic opens perTarget long-lived connections from every client to
// every target, notes their conntrack entries on nodes, then starts the
// new connections. It fails t if a long-lived connection cannot be opened.
func StartTraffic(t *testing.T, nodes []*Node, clients []*Pod, targets []Target, perTarget int) *Traffic {
	t.Helper()
	tr := &Traffic{start: time.Now(), stop: make(chan struct{}), nodes: nodes}
	for _, c := range clients {
		for _, tg := range targets {
			for i := range perTarget {
				conn, err := c.NS.Dial("tcp", tg.EchoAddr)
				if err != nil {
					t.Fatalf("long-lived connection from %s to %s: %v", c.Name, tg.Name, err)
				}
				lc := &longConn{name: fmt.Sprintf("%s→%s#%d", c.Name, tg.Name, i), conn: conn, local: conn.LocalAddr().String(), remote: tg.EchoAddr}
				if err := lc.exchange(); err != nil {
					t.Fatalf("long-lived connection %s: %v", lc.name, err)
				}
				tr.long = append(tr.long, lc)
			}
		}
	}
	var err error
	if tr.conntrack, err = conntrackIDs(nodes); err != nil {
		t.Fatal(err)
	}
	for _, lc := range tr.long {
		tr.wg.Go(func() { tr.keep(lc) })
	}
	for _, c := range clients {
		for _, tg := range targets {
			tr.wg.Go(func() { tr.dialEvery(c, tg) })
		}
	}
	return tr
}

// exchange writes a byte and reads it back.
func (lc *longConn) exchange() error {
	_ = lc.conn.SetDeadline(time.Now().Add(connTimeout))
	b := []byte{byte(lc.exchanged.Load())}
	if _, err := lc.conn.Write(b); err != nil {
		return err
	}
	got := []byte{0}
	if _, err := io.ReadFull(lc.conn, got); err != nil {
		return err
	}
	if got[0] != b[0] {
		return fmt.Errorf("echoed %d, sent %d", got[0], b[0])
	}
	lc.exchanged.Add(1)
	return nil
}

// keep exchanges a byte on lc every echoEvery until the traffic stops or
// the connection fails.
func (tr *Traffic) keep(lc *longConn) {
	tick := time.NewTicker(echoEvery)
	defer tick.Stop()
	for {
		select {
		case <-tr.stop:
			return
		case <-tick.C:
		}
		if err := lc.exchange(); err != nil {
			msg := fmt.Sprintf("%s: long-lived connection %s (%s) died after %d exchanges: %v", tr.since(), lc.name, lc.local, lc.exchanged.Load(), err)
			lc.err.Store(&msg)
			tr.fail(msg)
			return
		}
	}
}

// dialEvery makes a new connection from c to tg every newConnEvery, each
// in its own goroutine so that a slow one does not delay the next.
func (tr *Traffic) dialEvery(c *Pod, tg Target) {
	tick := time.NewTicker(newConnEvery)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-tr.stop:
			return
		case <-tick.C:
		}
		wg.Go(func() {
			tr.made.Add(1)
			name, err := c.Get(tg.Addr, connTimeout)
			if err == nil && name == "" {
				err = fmt.Errorf("no name answered")
			}
			if err != nil {
				tr.failed.Add(1)
				tr.fail(fmt.Sprintf("%s: new connection %s→%s: %v", tr.since(), c.Name, tg.Name, err))
			}
		})
	}
}

func (tr *Traffic) since() string { return time.Since(tr.start).Round(time.Millisecond).String() }

func (tr *Traffic) fail(msg string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.failures) < keptFailures {
		tr.failures = append(tr.failures, msg)
	}
}

// Event records a step of the test, so that failures can be placed
// between steps.
func (tr *Traffic) Event(what string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, tr.since()+": "+what)
}

// TrafficResult is what Stop measured.
type TrafficResult struct {
	Made, Failed       int64
	Long, LongSurvived int
	Exchanges          int64
	// Tracked counts the long-lived connections' conntrack entries found
	// on the nodes when they were opened; Kept, those still there, the
	// same entries, at the end.
	Tracked, Kept    int
	Failures, Events []string
}

// String is the result on one line.
func (r TrafficResult) String() string {
	return fmt.Sprintf("%d new connections, %d failed; %d/%d long-lived connections survived (%d exchanges); %d/%d of their conntrack entries kept",
		r.Made, r.Failed, r.LongSurvived, r.Long, r.Exchanges, r.Kept, r.Tracked)
}

// Stop stops the traffic, checks every long-lived connection and its
// conntrack entries once more, closes them and returns the counts.
func (tr *Traffic) Stop() (TrafficResult, error) {
	close(tr.stop)
	tr.wg.Wait()
	var r TrafficResult
	var err error
	if r.Tracked, r.Kept, err = tr.conntrackKept(); err != nil {
		return r, err
	}
	for _, lc := range tr.long {
		if lc.err.Load() == nil {
			if err := lc.exchange(); err != nil {
				tr.fail(fmt.Sprintf("%s: long-lived connection %s at the end: %v", tr.since(), lc.name, err))
			} else {
				r.LongSurvived++
			}
		}
		r.Exchanges += lc.exchanged.Load()
		lc.conn.Close()
	}
	r.Made, r.Failed, r.Long = tr.made.Load(), tr.failed.Load(), len(tr.long)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r.Failures, r.Events = slices.Clone(tr.failures), slices.Clone(tr.events)
	return r, nil
}

// conntrackIDs maps the original tuple ("10.244.0.2:41234>10.96.0.10:81")
// of every TCP flow in each node's table to its conntrack id: an entry
// deleted and re-created (by a conntrack flush, or the kernel picking a
// connection up again mid-stream) has a new id.
func conntrackIDs(nodes []*Node) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, n := range nodes {
		list, err := n.NS.Run("conntrack", "-L", "-p", "tcp", "-o", "id")
		if err != nil {
			return nil, err
		}
		ids := map[string]string{}
		for _, line := range strings.Split(list, "\n") {
			var src, dst, sport, dport, id string
			for _, f := range strings.Fields(line) {
				k, v, ok := strings.Cut(f, "=")
				if !ok {
					continue
				}
				switch {
				case k == "src" && src == "":
					src = v
				case k == "dst" && dst == "":
					dst = v
				case k == "sport" && sport == "":
					sport = v
				case k == "dport" && dport == "":
					dport = v
				case k == "id":
					id = v
				}
			}
			if id != "" {
				ids[net.JoinHostPort(src, sport)+">"+net.JoinHostPort(dst, dport)] = id
			}
		}
		out[n.Name] = ids
	}
	return out, nil
}

// longTuples are the original tuples of the long-lived connections.
func (tr *Traffic) longTuples() []string {
	var out []string
	for _, lc := range tr.long {
		out = append(out, lc.local+">"+lc.remote)
	}
	return out
}

// conntrackKept compares the long-lived connections' conntrack entries
// noted when they were opened with the nodes' tables now, and returns how
// many were noted and how many are still the same entries, recording each
// that is not as a failure.
func (tr *Traffic) conntrackKept() (tracked, kept int, err error) {
	now, err := conntrackIDs(tr.nodes)
	if err != nil {
		return 0, 0, err
	}
	for _, tuple := range tr.longTuples() {
		for node, ids := range tr.conntrack {
			id, ok := ids[tuple]
			if !ok {
				continue
			}
			tracked++
			if got := now[node][tuple]; got == id {
				kept++
			} else {
				tr.fail(fmt.Sprintf("%s: conntrack entry %s on %s: id %s, was %s", tr.since(), tuple, node, got, id))
			}
		}
	}
	return tracked, kept, nil
}
