package wire

import (
	"slices"
	"strings"
	"testing"
)

func TestPromptBlocksShareExactlyTheSharedBlocks(t *testing.T) {
	system := strings.Repeat("s", 100)
	chat := func(user string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"` + user + `"}],"max_tokens":5}`)
	}
	a := PromptBlocks(ShapeOpenAI, chat(strings.Repeat("a", 60)), 32, 100, nil)
	b := PromptBlocks(ShapeOpenAI, chat(strings.Repeat("b", 60)), 32, 100, nil)
	// "system" + 100 s + "user" + 60 letters = 174 bytes: 6 blocks of 32, the last short.
	if len(a) != 6 || len(b) != 6 {
		t.Fatalf("blocks: %d and %d, want 6", len(a), len(b))
	}
	// The first 106 bytes ("system" and 100 s) agree: blocks 0-2 (96 bytes).
	for i := range 3 {
		if a[i] != b[i] {
			t.Errorf("block %d differs though its text is shared", i)
		}
	}
	for i := 3; i < 6; i++ {
		if a[i] == b[i] {
			t.Errorf("block %d is equal though its text differs", i)
		}
	}
	// Chained: the same block of text after a different prefix hashes apart.
	c := PromptBlocks(ShapeOpenAI, []byte(`{"prompt":"xxxxyyyy"}`), 4, 10, nil)
	d := PromptBlocks(ShapeOpenAI, []byte(`{"prompt":"zzzzyyyy"}`), 4, 10, nil)
	if len(c) != 2 || c[1] == d[1] {
		t.Errorf("second blocks %v %v: want 2 blocks, chained to differ", c, d)
	}
}

func TestPromptBlocksBounded(t *testing.T) {
	body := []byte(`{"prompt":"` + strings.Repeat("w ", 1000) + `","model":"x"}`)
	if got := PromptBlocks(ShapeOpenAI, body, 10, 7, nil); len(got) != 7 {
		t.Errorf("got %d hashes, want the bound 7", len(got))
	}
	if got := PromptBlocks(ShapeOpenAI, body, 0, 7, nil); len(got) != 0 {
		t.Errorf("size 0: got %d hashes, want none", len(got))
	}
	// Not JSON: hashed whole, still bounded.
	if got := PromptBlocks(ShapeOpenAI, []byte("not json at all"), 4, 100, nil); len(got) != 4 {
		t.Errorf("odd body: got %d hashes, want 4 (15 bytes in blocks of 4)", len(got))
	}
	// Media is skipped: an image adds no block.
	img := []byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:` + strings.Repeat("A", 500) + `"}}]}]}`)
	if got := PromptBlocks(ShapeOpenAI, img, 16, 100, nil); len(got) != 1 {
		t.Errorf("image prompt: got %d hashes, want 1 (\"user\" and \"image_url\", 13 bytes)", len(got))
	}
}

// BenchmarkPromptBlocks fingerprints a chat prompt of 40,000 characters
// (about 10,000 tokens) in blocks of 2,048 characters, as the request log
// does: SetBytes makes the rate per byte of prompt.
func BenchmarkPromptBlocks(b *testing.B) {
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"system","content":"` + strings.Repeat("word ", 4000) +
		`"},{"role":"user","content":"` + strings.Repeat("more ", 4000) + `"}]}`)
	b.SetBytes(40000)
	b.ReportAllocs()
	dst := make([]uint64, 0, 32)
	for b.Loop() {
		dst = PromptBlocks(ShapeOpenAI, body, 2048, 256, dst[:0])
	}
}

// A block's hash depends on its bytes, not on how they were split into
// strings.
func TestPromptBlocksIgnoreSplits(t *testing.T) {
	whole := PromptBlocks(ShapeOpenAI, []byte(`{"prompt":"abcdefghijklmnopqrstuvwxyz0123456789"}`), 16, 10, nil)
	split := PromptBlocks(ShapeOpenAI, []byte(`{"prompt":["abc","defghijklmnopqr","stuvwxyz01234","56789"]}`), 16, 10, nil)
	if len(whole) != 3 || !slices.Equal(whole, split) {
		t.Errorf("whole %x, split %x: want the same 3 hashes", whole, split)
	}
	other := PromptBlocks(ShapeOpenAI, []byte(`{"prompt":"abcdefghijklmnopqrstuvwxyz0123456780"}`), 16, 10, nil)
	if other[0] != whole[0] || other[1] != whole[1] || other[2] == whole[2] {
		t.Errorf("a change in the last byte: %x against %x", other, whole)
	}
}
