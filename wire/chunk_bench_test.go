package wire

import "testing"

// BenchmarkInspect measures Inspect on each chunk shape in chunkShapes: the
// relay and the benchmark client call it once per streamed event.
func BenchmarkInspect(b *testing.B) {
	for _, s := range chunkShapes {
		data := []byte(s.data)
		b.Run(s.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Inspect(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
