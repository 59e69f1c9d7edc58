package wire

import (
	"bytes"
	"io"
	"testing"
)

// BenchmarkEventReader reads one stream of 256 vLLM chat chunks plus the
// finish, usage and [DONE] events per op, as a relay does: a new reader per
// stream, so allocs/op includes the reader's buffers. "general" forces the
// copying path that every event took before the no-copy path for whole
// one-line events.
func BenchmarkEventReader(b *testing.B) {
	b.Run("whole", func(b *testing.B) { benchmarkEventReader(b, false) })
	b.Run("general", func(b *testing.B) { benchmarkEventReader(b, true) })
}

func benchmarkEventReader(b *testing.B, general bool) {
	var stream []byte
	for i := 0; i < 256; i++ {
		stream = AppendData(stream, []byte(chunkShapes[1].data))
	}
	stream = AppendData(stream, []byte(chunkShapes[2].data))
	stream = AppendData(stream, []byte(chunkShapes[4].data))
	stream = AppendData(stream, DoneData)
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	r := bytes.NewReader(stream)
	for b.Loop() {
		r.Reset(stream)
		er := NewEventReader(r)
		er.noWhole = general
		n := 0
		for {
			_, err := er.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != 259 {
			b.Fatalf("read %d events, want 259", n)
		}
	}
}
