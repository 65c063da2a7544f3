package sampler

import (
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"
)

// drawRNG returns the random source of one draw. It is derived from the
// sampler's seed, the trial's number, the parameter's name (or a fixed
// label for a joint draw) and the purpose, never from a generator that
// advances across calls: a proposal then depends only on these and on the
// stored trials, so a resumed study (a new process) proposes exactly what
// the first process would have, and two trials asked from the same state
// (pending asks) get different draws because their numbers differ.
// The stream is PCG from math/rand/v2, fixed for a given Go release.
func drawRNG(seed int64, number int, name, purpose string) *rand.Rand {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(seed))
	binary.LittleEndian.PutUint64(b[8:], uint64(int64(number)))
	h.Write(b[:])
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write([]byte(name))
	s1 := splitmix64(h.Sum64())
	return rand.New(rand.NewPCG(s1, splitmix64(s1)))
}

// splitmix64 scrambles a 64-bit value (Steele et al.'s SplitMix64 finaliser).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
