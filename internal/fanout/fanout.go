// Package fanout renders independent items on several goroutines for the
// dataplanes' full syncs, keeping what the caller sees the same as one
// goroutine would give: the results in input order and the skipped-input
// reports in the order a sequential run makes them, all on the calling
// goroutine (so a Config.OnSkip is never called concurrently).
package fanout

import (
	"runtime"
	"sync"
)

// maxDefault caps the goroutines Workers(0) gives: a node agent shares
// the node with its pods.
const maxDefault = 4

// Workers resolves a Config's worker count: n itself when positive, and
// for 0 GOMAXPROCS, at most 4.
func Workers(n int) int {
	if n > 0 {
		return n
	}
	return min(runtime.GOMAXPROCS(0), maxDefault)
}

// Skip reports an input left out, as the dataplanes' skip methods do.
type Skip func(reason string, kv ...any)

// Map sets out[i] = f(in[i]) for every i. It runs on up to workers
// goroutines, each over a contiguous run of at least minPer items, and on
// the calling goroutine alone when that leaves one. newF returns the
// function of one goroutine, given where it reports skips; functions
// returned by different calls must be safe to run concurrently.
func Map[In, Out any](workers, minPer int, in []In, out []Out, skip Skip, newF func(Skip) func(In) Out) {
	if minPer < 1 {
		minPer = 1
	}
	workers = min(workers, len(in)/minPer)
	if workers <= 1 {
		f := newF(skip)
		for i, x := range in {
			out[i] = f(x)
		}
		return
	}
	type skipped struct {
		reason string
		kv     []any
	}
	skips := make([][]skipped, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := len(in)*w/workers, len(in)*(w+1)/workers
		f := newF(func(reason string, kv ...any) { skips[w] = append(skips[w], skipped{reason, kv}) })
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				out[i] = f(in[i])
			}
		})
	}
	wg.Wait()
	for _, list := range skips {
		for _, s := range list {
			skip(s.reason, s.kv...)
		}
	}
}
