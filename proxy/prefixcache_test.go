package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kneecap/kneecap/wire"
)

// A continued conversation, whose history the engine served before, is
// charged its new part; the first turn of another is charged whole.
func TestPrefixCacheTellsWarmFromCold(t *testing.T) {
	c := newPrefixCache()
	body := func(text string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`)
	}
	words := func(seed, n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "w%d-%d ", seed, i)
		}
		return b.String()
	}
	history := words(1, 2000) // about 20,000 characters
	// Turn one: cold, the engine caches none of it; turn two shares it.
	b1 := body(history)
	blocks := cacheBlocks(wire.ShapeOpenAI, b1, 1<<20)
	share, _ := c.predict(blocks, len(history), 5000)
	if share != 0 {
		t.Fatalf("empty table predicted %.2f cached", share)
	}
	c.learn(blocks, share, 5000, 0)
	for i := range 20 { // turns whose history the engine served from its cache
		h := history + words(100+i, 300)
		bl := cacheBlocks(wire.ShapeOpenAI, body(h), 1<<20)
		s, _ := c.predict(bl, len(h), 5700)
		c.learn(bl, s, 5700, 5000)
	}
	warm := history + words(7, 300)
	bw := cacheBlocks(wire.ShapeOpenAI, body(warm), 1<<20)
	if _, charge := c.predict(bw, len(warm), 5700); charge > 1500 {
		t.Errorf("a continued conversation of 5,700 tokens, 5,000 served before: charged %d", charge)
	}
	cold := words(9, 2300)
	bc := cacheBlocks(wire.ShapeOpenAI, body(cold), 1<<20)
	if _, charge := c.predict(bc, len(cold), 5700); charge < 5000 {
		t.Errorf("a new conversation of 5,700 tokens: charged %d, want nearly all", charge)
	}
}

// The table never holds more than two generations, whatever a client
// sends.
func TestPrefixCacheBounded(t *testing.T) {
	c := newPrefixCache()
	blocks := make([]uint64, cacheMaxBlocks)
	for i := range 3 * cacheTableGen / cacheMaxBlocks {
		for j := range blocks {
			blocks[j] = uint64(i*cacheMaxBlocks + j)
		}
		c.learn(blocks, 0, 100, 0)
	}
	if n := len(c.cur) + len(c.old); n > 2*cacheTableGen {
		t.Fatalf("%d fingerprints held, want at most %d", n, 2*cacheTableGen)
	}
}

// BenchmarkPrefixCacheLongPrompt is the prediction's cost on a request
// whose prompt is about 10,000 tokens (40,000 characters): its
// fingerprint, the lookup and the learning.
func BenchmarkPrefixCacheLongPrompt(b *testing.B) {
	text := strings.Repeat("lorem ipsum dolor sit amet ", 1500)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + text + `"}]}`)
	c := newPrefixCache()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		bl := cacheBlocks(wire.ShapeOpenAI, body, len(text))
		share, _ := c.predict(bl, len(text), 10000)
		c.learn(bl, share, 10000, 9000)
	}
}
