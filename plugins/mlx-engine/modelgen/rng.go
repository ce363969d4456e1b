package modelgen

import "hash/fnv"

// rng is splitmix64: tiny, fast, and fully specified here, so a seed produces the same bytes on every Go
// version and platform (math/rand's algorithms are not promised to stay the same).
type rng struct{ s uint64 }

func newRNG(seed uint64, stream string) *rng {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return &rng{s: seed ^ h.Sum64()}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// normal returns an approximately standard normal value: the Irwin–Hall sum of four 16-bit uniforms taken from
// one 64-bit draw, centred and scaled to unit variance. Its tails stop at ±3.46, which suits weight init.
func (r *rng) normal() float32 {
	v := r.next()
	s := float32(v&0xffff) + float32(v>>16&0xffff) + float32(v>>32&0xffff) + float32(v>>48)
	return (s - 131070) * (1 / 37837.23)
}

// intn returns a uniform value in [0, n).
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }
