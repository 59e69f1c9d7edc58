package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkRequest measures the client's cost of one streamed request of
// 128 output chunks (the engine writes a prepared response at once, so most
// of the time is the client's): go test -run - -bench Request ./bench/
func BenchmarkRequest(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n")
	for range 128 {
		sb.WriteString("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}\n\n")
	}
	sb.WriteString("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":128,\"completion_tokens\":128,\"total_tokens\":256}}\n\ndata: [DONE]\n\n")
	body := sb.String()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	b.ReportAllocs()
	b.ResetTimer()
	rep, err := Run(b.Context(), Config{BaseURL: srv.URL, Model: "m", Levels: []float64{4}, Requests: b.N})
	if err != nil {
		b.Fatal(err)
	}
	if s := rep.Levels[0].Summary; s.Completed < b.N {
		b.Fatalf("%d completed", s.Completed)
	}
}
