package plog

import "github.com/sushka-io/sushka/internal/vfs"

// Preallocation of the active segment (WriteSyscall, issue 12). A buffered
// write that extends an ext4 file pays, for every 4 KiB block, the delayed
// allocation's reservation and extent bookkeeping (ext4_da_get_block_prep,
// quota, the extent status tree): 15% of the broker's CPU under a 1 KiB
// acks=all produce load. Blocks reserved ahead with fallocate(2)
// (FALLOC_FL_KEEP_SIZE: the size, hence what recovery reads, is unchanged)
// skip that. The reserve grows with the segment, as much again as it holds
// up to preallocMaxBytes, and only once it holds preallocMinBytes: a
// partition written slowly (100,000 of them on a broker) reserves nothing,
// and no segment reserves more than its data. Sealing a segment (roll,
// Close) truncates it to its data, which frees the reserve.
const (
	preallocMinBytes = 1 << 20
	preallocMaxBytes = 16 << 20
)

// preallocator is the writer's reserve of the active segment (writer).
type preallocator struct {
	end    int64 // the reserve ends here (0: none)
	failed bool  // fallocate failed (ENOSPC, not supported): not tried again in this segment
}

// reserve makes sure the n bytes about to be written at pos fall in the
// reserve, growing it where the rule above says; limit is segment.bytes.
// A failure is no error: the write goes on without a reserve.
func (p *preallocator) reserve(f vfs.File, pos, n, limit int64) {
	if p.failed || pos < preallocMinBytes || pos+n <= p.end {
		return
	}
	pa, ok := f.(vfs.Preallocator)
	if !ok {
		p.failed = true
		return
	}
	from := max(p.end, pos)
	end := min(pos+n+min(pos, preallocMaxBytes), max(limit, pos+n))
	if err := pa.Preallocate(from, end-from); err != nil {
		p.failed = true
		return
	}
	p.end = end
}

// reset forgets the reserve: a new active segment.
func (p *preallocator) reset() { *p = preallocator{} }

// trim frees the reserve past size (the segment's data) at a seal.
func (p *preallocator) trim(f vfs.File, size int64) error {
	if p.end <= size {
		return nil
	}
	p.end = 0
	return f.Truncate(size)
}
