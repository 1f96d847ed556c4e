package proc

import "math/bits"

// splitmix64 is deterministic mode's PRNG: the whole algorithm is the three
// lines of next, so a seed gives the same choices on every Go version and
// every machine (math/rand's generators promise less).
type splitmix64 struct{ state uint64 }

func (r *splitmix64) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// below returns a number in [0, n) by Lemire's multiply-shift (no division).
func (r *splitmix64) below(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}
