package enginemetrics

import "strconv"

// maxLoRALabel bounds one label value of vllm:lora_requests_info kept in a
// reading (a comma-separated list of adapter names); a longer value is cut
// at the last whole name that fits.
const maxLoRALabel = 4 << 10

// LoRA is vLLM's vllm:lora_requests_info as the engine wrote it last: the
// adapters of running and of waiting requests (comma-separated names, as
// in its labels) and how many it can hold at once. The endpoint picker
// routes by it (its LoRA affinity), and kneecap passes it on unchanged.
type LoRA struct {
	// Running and Waiting are the labels running_lora_adapters and
	// waiting_lora_adapters.
	Running, Waiting string
	// MaxLoRA is the label max_lora; -1 when absent or not a number.
	MaxLoRA int
	// At is the gauge's value: when vLLM wrote the series (Unix seconds).
	At float64
}

// set keeps one label of a vllm:lora_requests_info series.
func (l *LoRA) set(name, value []byte) {
	switch string(name) {
	case "running_lora_adapters":
		l.Running = adapters(value)
	case "waiting_lora_adapters":
		l.Waiting = adapters(value)
	case "max_lora":
		l.MaxLoRA = -1
		if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 {
			l.MaxLoRA = n
		}
	}
}

// adapters copies a list of adapter names, at most maxLoRALabel bytes of
// it, cut after a whole name.
func adapters(b []byte) string {
	if len(b) <= maxLoRALabel {
		return string(b)
	}
	b = b[:maxLoRALabel]
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ',' {
			return string(b[:i])
		}
	}
	return ""
}
