package sim

import (
	"unicode"
	"unicode/utf8"
)

// cacheBlockTokens is the prefix cache's granularity: a prompt is cached
// and matched in whole blocks of this many tokens. SGLang's radix tree
// matches token by token (page size 1 by default); blocks keep the
// simulator's cache a map of chain hashes that a 2,000-token prompt walks
// in 125 lookups, at the cost of up to 15 uncached tokens per match. 16 is
// also vLLM's default KV block size, whose prefix cache hashes blocks the
// same way.
const cacheBlockTokens = 16

// FNV-1a, inlined: the chain is hashed byte by byte over the whole prompt,
// and a hash.Hash per block would allocate.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// chainBuilder hashes a prompt's tokens into a chain of block hashes:
// h_i = mix(h_{i-1}, block_i), so that h_i names the whole prefix up to
// the end of block i and two prompts share h_1..h_k exactly when their
// first k blocks are the same tokens.
type chainBuilder struct {
	chain []uint64
	prev  uint64 // the last full block's hash
	acc   uint64 // FNV-1a of the tokens of the block being filled
	n     int    // tokens in the block being filled
	total int    // tokens seen
}

func newChainBuilder() *chainBuilder {
	return &chainBuilder{acc: fnvOffset}
}

// feed feeds one byte of the current token.
func (b *chainBuilder) feed(c byte) {
	b.acc = (b.acc ^ uint64(c)) * fnvPrime
}

// endToken closes the current token; a separator keeps "ab","c" apart
// from "a","bc".
func (b *chainBuilder) endToken() {
	b.feed(0)
	b.total++
	b.n++
	if b.n == cacheBlockTokens {
		b.prev = mix64(b.prev ^ mix64(b.acc))
		b.chain = append(b.chain, b.prev)
		b.acc, b.n = fnvOffset, 0
	}
}

// marker adds one token that is no word of the text (a chat template's
// special token, a tool definition's share of the prompt), identified by
// tag and i.
func (b *chainBuilder) marker(tag byte, i uint64) {
	b.feed(0xff) // no valid UTF-8 text has this byte: markers never equal words
	b.feed(tag)
	for ; i > 0; i >>= 8 {
		b.feed(byte(i))
	}
	b.endToken()
}

// words adds the tokens of s: the words CountTokens counts, in order, with
// the same notion of space (the ASCII set, then unicode.IsSpace; an
// invalid byte is one rune, as a range over a string reads it). It
// returns how many there were.
func (b *chainBuilder) words(s string) int {
	n, in := 0, false
	for i := 0; i < len(s); {
		c, size := s[i], 1
		var space bool
		if c < utf8.RuneSelf {
			space = c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
		}
		if space {
			if in {
				b.endToken()
				in = false
			}
			i += size
			continue
		}
		if !in {
			n++
			in = true
		}
		for j := i; j < i+size; j++ {
			b.feed(s[j])
		}
		i += size
	}
	if in {
		b.endToken()
	}
	return n
}

// mix64 is splitmix64's finalizer: it spreads FNV's weak high bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// prefixCache is the simulated radix cache: the blocks of prompts whose
// prefill finished, keyed by chain hash, in least-recently-used order.
// Touching a prefix moves its blocks to the front deepest first, so that
// a block is always more recent than every block that continues it: the
// least recently used block is then always a leaf, and evicting from the
// back frees leaves first as SGLang's radix tree does, never leaving a
// block whose parent is gone (which no lookup could reach).
type prefixCache struct {
	blocks map[uint64]*cacheBlock
	// root is the sentinel of the circular LRU list: root.next is the
	// most recently used block, root.prev the least.
	root cacheBlock
	free *cacheBlock // evicted blocks for reuse (a long run evicts many)
}

// cacheBlock is one cached block of cacheBlockTokens tokens.
type cacheBlock struct {
	key        uint64
	prev, next *cacheBlock
}

func newPrefixCache() *prefixCache {
	c := &prefixCache{blocks: map[uint64]*cacheBlock{}}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

// tokens is the number of prompt tokens the cache holds.
func (c *prefixCache) tokens() int { return len(c.blocks) * cacheBlockTokens }

// match returns how many leading blocks of chain the cache holds.
func (c *prefixCache) match(chain []uint64) int {
	for i, h := range chain {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(chain)
}

// matchBlocks is match that also appends the matched blocks to into, so
// that touching them again (touchKnown) needs no lookup.
func (c *prefixCache) matchBlocks(chain []uint64, into []*cacheBlock) (int, []*cacheBlock) {
	for i, h := range chain {
		b, ok := c.blocks[h]
		if !ok {
			return i, into
		}
		into = append(into, b)
	}
	return len(chain), into
}

// touch marks chain's blocks as just used, adding those not cached. chain
// is a prompt's chain or a leading part of one: each block continues the
// one before it, so touching deepest first keeps every block more recent
// than its continuations.
func (c *prefixCache) touch(chain []uint64) { c.touchKnown(chain, nil) }

// touchKnown is touch given the blocks a match found for chain's first
// len(known) hashes: a known block still cached (linked, same key: a key
// has one cached block) is moved without a lookup. A long prompt's chain is
// matched at admission and touched twice; the lookups were most of a
// long-context run's time.
func (c *prefixCache) touchKnown(chain []uint64, known []*cacheBlock) {
	for i := len(chain) - 1; i >= 0; i-- {
		h := chain[i]
		var b *cacheBlock
		if i < len(known) && known[i].prev != nil && known[i].key == h {
			b = known[i]
		}
		ok := b != nil
		if !ok {
			b, ok = c.blocks[h]
		}
		if ok {
			b.prev.next, b.next.prev = b.next, b.prev
		} else {
			b = c.free
			if b != nil {
				c.free = b.next
			} else {
				b = &cacheBlock{}
			}
			b.key = h
			c.blocks[h] = b
		}
		b.prev, b.next = &c.root, c.root.next
		c.root.next.prev = b
		c.root.next = b
	}
}

// evict drops the least recently used block, a leaf (nothing when empty).
func (c *prefixCache) evict() {
	b := c.root.prev
	if b == &c.root {
		return
	}
	b.prev.next, b.next.prev = b.next, b.prev
	delete(c.blocks, b.key)
	b.prev, b.next = nil, c.free
	c.free = b
}
