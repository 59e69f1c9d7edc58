package bench

import (
	"encoding/json"
	"io"
	"time"
)

// JSONReport is the whole JSON report.
type JSONReport struct {
	BaseURL     string             `json:"base_url"`
	Endpoint    string             `json:"endpoint"`
	Model       string             `json:"model_id"`
	Mode        string             `json:"mode"`
	Workload    string             `json:"workload"`
	Goodput     map[string]float64 `json:"goodput_config_dict"`
	Definitions string             `json:"definitions"`
	Levels      []map[string]any   `json:"levels"`
	KneeBest    *float64           `json:"knee_best_goodput_level"`
	KneeLastMet *float64           `json:"knee_last_met_level"`
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// levelJSON flattens a level into vLLM's keys.
func (rep *Report) levelJSON(lv Level) map[string]any {
	s := lv.Summary
	m := map[string]any{
		"duration": s.Duration.Seconds(), "completed": s.Completed, "good": s.Good,
		"rejected": s.Rejected, "failed": s.Failed, "gave_up": s.GaveUp, "unfinished": s.Unfinished,
		"total_input_tokens": s.InputTokens, "total_output_tokens": s.OutputTokens,
		"request_throughput": s.RequestThroughput, "request_goodput": s.Goodput,
		"output_throughput": s.OutputThroughput, "total_token_throughput": s.TotalThroughput,
		"attainment": s.Attainment,
	}
	if rep.Mode == Closed {
		m["max_concurrency"] = int(lv.Value)
	} else {
		m["request_rate"] = lv.Value
		m["burstiness"] = rep.Burstiness
	}
	for name, st := range map[string]Stats{"ttft": s.TTFT, "tpot": s.TPOT, "itl": s.ITL, "e2el": s.E2E} {
		m["mean_"+name+"_ms"] = msf(st.Mean)
		m["median_"+name+"_ms"] = msf(st.P50)
		m["std_"+name+"_ms"] = msf(st.Std)
		m["p90_"+name+"_ms"] = msf(st.P90)
		m["p99_"+name+"_ms"] = msf(st.P99)
	}
	return m
}

// WriteJSON writes the report as JSON: per level an object with vLLM's
// field names (request_throughput, request_goodput, output_throughput,
// median_ttft_ms, p99_tpot_ms, mean_e2el_ms, ...) plus rejected, failed,
// unfinished and attainment, and the knee.
func (rep *Report) WriteJSON(w io.Writer) error {
	out := JSONReport{
		BaseURL: rep.BaseURL, Endpoint: rep.Endpoint.path(), Model: rep.Model, Mode: rep.Mode.String(),
		Workload: rep.Workload, Goodput: map[string]float64{}, Definitions: rep.Definitions(),
	}
	if rep.Targets.TTFT > 0 {
		out.Goodput["ttft"] = msf(rep.Targets.TTFT)
	}
	if rep.Targets.TPOT > 0 {
		out.Goodput["tpot"] = msf(rep.Targets.TPOT)
	}
	if rep.Targets.E2E > 0 {
		out.Goodput["e2el"] = msf(rep.Targets.E2E)
	}
	for _, lv := range rep.Levels {
		out.Levels = append(out.Levels, rep.levelJSON(lv))
	}
	k := rep.Knee()
	if k.Best >= 0 {
		out.KneeBest = &rep.Levels[k.Best].Value
	}
	if k.LastMet >= 0 {
		out.KneeLastMet = &rep.Levels[k.LastMet].Value
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
