package nftnl

import "golang.org/x/sys/unix"

// mappedMin is the smallest batch whose buffer is mapped outside the Go
// heap.
const mappedMin = 1 << 20

// batchBuffer returns an empty buffer of capacity size and, for a big
// batch, the memory mapping it lives in, which release unmaps. A cold
// sync's batch is megabytes of bytes without pointers (80 MB at 100,000
// services), built once and sent: in the Go heap it would count towards
// the next collection and stay resident after it; mapped, it leaves when
// it is sent.
func batchBuffer(size int) (buf, mapped []byte) {
	if size < mappedMin {
		return make([]byte, 0, size), nil
	}
	m, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return make([]byte, 0, size), nil
	}
	return m[:0], m
}

// release unmaps the batch's buffer if it was mapped; the batch's bytes
// are gone then. An encoding that outgrew the mapping has moved to the
// heap, where the collector takes it.
func (b *batch) release() {
	if b.mapped == nil {
		return
	}
	b.w.b = nil
	_ = unix.Munmap(b.mapped)
	b.mapped = nil
}
