package enginemetrics

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"strconv"
)

// The engines, as Reading.Engine names them: which family of metric names
// the exposition carried.
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineLlamaCpp = "llamacpp"
)

// field is one quantity the parser reads. Several metric names feed one
// field; each is accumulated over all its series.
type field int

const (
	fNone field = iota
	fVLLMRunning
	fVLLMWaiting
	fVLLMUsage    // vllm:kv_cache_usage_perc
	fVLLMUsageOld // vllm:gpu_cache_usage_perc
	fVLLMCapacity // vllm:cache_config_info: num_gpu_blocks x block_size
	fVLLMPreempt
	fVLLMLoRA // vllm:lora_requests_info: an info gauge, its labels kept as they are
	fSGLRunning
	fSGLWaiting
	fSGLUsage
	fSGLUsed
	fSGLCapacity
	fLCPPUsage
	fLCPPTokens
	fLCPPRunning
	fLCPPWaiting
	numFields
)

// kind says how a field's samples are checked and combined.
type kind int

const (
	count kind = iota // a non-negative count: summed over series
	ratio             // a share in [0, 1]: averaged over series
)

// lookup maps a sample name to its engine and field; fNone for a name of an
// engine's family that kneecap does not read.
func lookup(name []byte) (engine string, f field) {
	switch {
	case bytes.HasPrefix(name, []byte("vllm:")):
		engine = EngineVLLM
		switch string(name[len("vllm:"):]) {
		case "num_requests_running":
			f = fVLLMRunning
		case "num_requests_waiting":
			f = fVLLMWaiting
		case "kv_cache_usage_perc":
			f = fVLLMUsage
		case "gpu_cache_usage_perc":
			f = fVLLMUsageOld
		case "cache_config_info":
			f = fVLLMCapacity
		case "num_preemptions_total":
			f = fVLLMPreempt
		case "lora_requests_info":
			f = fVLLMLoRA
		}
	case bytes.HasPrefix(name, []byte("sglang:")):
		engine = EngineSGLang
		switch string(name[len("sglang:"):]) {
		case "num_running_reqs":
			f = fSGLRunning
		case "num_queue_reqs":
			f = fSGLWaiting
		case "token_usage":
			f = fSGLUsage
		case "num_used_tokens":
			f = fSGLUsed
		case "max_total_num_tokens":
			f = fSGLCapacity
		}
	case bytes.HasPrefix(name, []byte("llamacpp:")):
		engine = EngineLlamaCpp
		switch string(name[len("llamacpp:"):]) {
		case "kv_cache_usage_ratio":
			f = fLCPPUsage
		case "kv_cache_tokens":
			f = fLCPPTokens
		case "requests_processing":
			f = fLCPPRunning
		case "requests_deferred":
			f = fLCPPWaiting
		}
	}
	return engine, f
}

func (f field) kind() kind {
	switch f {
	case fVLLMUsage, fVLLMUsageOld, fSGLUsage, fLCPPUsage:
		return ratio
	}
	return count
}

// maxCount bounds a plausible count (tokens, requests): a larger value is
// rejected like a negative one.
const maxCount = 1e15

// acc accumulates one field over its series. A field with any rejected
// sample is unknown: a sum that misses a part would be wrong.
type acc struct {
	sum float64
	n   int
	bad bool
}

// add adds one sample and reports whether it was accepted.
func (a *acc) add(v float64, k kind) bool {
	ok := !math.IsNaN(v) && v >= 0 && !math.IsInf(v, 0)
	switch k {
	case ratio:
		ok = ok && v <= 1
	case count:
		ok = ok && v <= maxCount
	}
	if !ok {
		a.bad = true
		return false
	}
	a.sum += v
	a.n++
	return true
}

// value is the field's value: the sum (count) or the mean (ratio) over its
// series; NaN when absent or rejected.
func (a *acc) value(k kind) float64 {
	if a.bad || a.n == 0 {
		return math.NaN()
	}
	if k == ratio {
		return a.sum / float64(a.n)
	}
	return a.sum
}

// parser reads a Prometheus text exposition line by line and keeps only the
// samples it needs: the names of the first engine family it meets (a
// second family in the same body is ignored), accumulated per field. It
// never holds more than one line.
type parser struct {
	engine string
	fields [numFields]acc
	lora   *LoRA   // the newest vllm:lora_requests_info series; nil: none
	loraAt float64 // its value (vLLM: the time it was written)
	// blockSize and blocks are vllm:cache_config_info's labels (the last
	// series); NaN unless known.
	blockSize, blocks float64
	rejected          int // samples of a field that were rejected
	matched           int // samples of a field, rejected or not
}

// parse reads r to its end (or its first error) and returns what it read.
// Lines longer than br's buffer are skipped. The error is r's, never one of
// the exposition's content: a malformed line is skipped.
func (p *parser) parse(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// Skip the rest of an oversized line.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err == nil {
				continue
			}
			line = nil
		}
		if len(line) > 0 {
			p.line(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// line reads one line of the exposition.
func (p *parser) line(b []byte) {
	b = bytes.TrimLeft(b, " \t")
	if len(b) == 0 || b[0] == '#' {
		return
	}
	end := bytes.IndexAny(b, "{ \t\r\n")
	if end <= 0 {
		return
	}
	engine, f := lookup(b[:end])
	if engine == "" || (p.engine != "" && engine != p.engine) {
		return
	}
	p.engine = engine
	if f == fNone {
		return
	}
	rest := b[end:]
	var blocks, blockSize float64 = math.NaN(), math.NaN()
	lora := LoRA{MaxLoRA: -1}
	if rest[0] == '{' {
		var ok bool
		rest, ok = labels(rest[1:], func(name, value []byte) {
			switch f {
			case fVLLMCapacity:
				switch string(name) {
				case "num_gpu_blocks":
					blocks = parseInt(value)
				case "block_size":
					blockSize = parseInt(value)
				}
			case fVLLMLoRA:
				lora.set(name, value)
			}
		})
		if !ok {
			return
		}
	}
	rest = bytes.TrimLeft(rest, " \t")
	if i := bytes.IndexAny(rest, " \t\r\n"); i >= 0 {
		rest = rest[:i]
	}
	v, err := strconv.ParseFloat(string(rest), 64)
	if err != nil {
		return // not a sample line
	}
	switch f {
	case fVLLMCapacity:
		// An info gauge: the capacity is in its labels.
		v = blocks * blockSize
		p.blockSize, p.blocks = blockSize, blocks
	case fVLLMLoRA:
		// An info gauge whose value is when vLLM wrote it: the newest
		// series is the state now.
		if p.lora == nil || v > p.loraAt {
			kept := lora // only this one is allocated
			kept.At = v
			p.lora, p.loraAt = &kept, v
		}
		return
	}
	p.matched++
	if !p.fields[f].add(v, f.kind()) {
		p.rejected++
	}
}

// parseInt reads a label value that must be a positive decimal integer
// (vLLM writes str(int)); NaN otherwise ("None" before the engine profiled
// its memory).
func parseInt(b []byte) float64 {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n <= 0 || n > 1<<40 {
		return math.NaN()
	}
	return float64(n)
}

// labels reads a label set after its opening brace up to and including the
// closing one, calling each for every name and (unescaped) value; it
// returns what follows. ok is false when the set is malformed (an escape
// other than \\, \" and \n among them).
func labels(b []byte, each func(name, value []byte)) (rest []byte, ok bool) {
	var val []byte
	for {
		b = bytes.TrimLeft(b, " \t")
		if len(b) == 0 {
			return nil, false
		}
		if b[0] == '}' {
			return b[1:], true
		}
		eq := bytes.IndexByte(b, '=')
		if eq <= 0 {
			return nil, false
		}
		name := bytes.TrimRight(b[:eq], " \t")
		b = bytes.TrimLeft(b[eq+1:], " \t")
		if len(b) == 0 || b[0] != '"' {
			return nil, false
		}
		b = b[1:]
		val = val[:0]
		closed := false
		for i := 0; i < len(b); i++ {
			c := b[i]
			if c == '\\' && i+1 < len(b) {
				i++
				switch b[i] {
				case 'n':
					val = append(val, '\n')
				case '\\', '"':
					val = append(val, b[i])
				default:
					return nil, false // not an escape of the format
				}
				continue
			}
			if c == '"' {
				b = b[i+1:]
				closed = true
				break
			}
			val = append(val, c)
		}
		if !closed {
			return nil, false
		}
		each(name, val)
		b = bytes.TrimLeft(b, " \t")
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
		}
	}
}

// reading returns what the parser read as a Reading (At unset) and why no
// reading could be made: errGarbled when no name of a known engine
// appeared, errInvalid when none of the fields kneecap reads had a usable
// value.
func (p *parser) reading() (Reading, error) {
	r := unknownReading()
	r.Engine = p.engine
	if p.engine == "" {
		return r, errGarbled
	}
	v := func(f field) float64 { return p.fields[f].value(f.kind()) }
	switch p.engine {
	case EngineVLLM:
		r.KVUsage = v(fVLLMUsage)
		if math.IsNaN(r.KVUsage) && p.fields[fVLLMUsage].n == 0 && !p.fields[fVLLMUsage].bad {
			r.KVUsage = v(fVLLMUsageOld) // vLLM before 0.10 has only the older name
		}
		r.KVCapacity = v(fVLLMCapacity)
		if !math.IsNaN(r.KVCapacity) {
			r.BlockSize, r.Blocks = p.blockSize, p.blocks
		}
		r.LoRA = p.lora
		r.Running, r.Waiting, r.Preemptions = v(fVLLMRunning), v(fVLLMWaiting), v(fVLLMPreempt)
	case EngineSGLang:
		r.KVUsage, r.KVTokens, r.KVCapacity = v(fSGLUsage), v(fSGLUsed), v(fSGLCapacity)
		r.Running, r.Waiting = v(fSGLRunning), v(fSGLWaiting)
	case EngineLlamaCpp:
		r.KVUsage, r.KVTokens = v(fLCPPUsage), v(fLCPPTokens)
		r.Running, r.Waiting = v(fLCPPRunning), v(fLCPPWaiting)
	}
	if r.KVCapacity == 0 {
		r.KVCapacity = math.NaN() // no cache at all is no capacity to divide by
	}
	known := func(x float64) bool { return !math.IsNaN(x) }
	switch {
	case !known(r.KVTokens) && known(r.KVUsage) && known(r.KVCapacity):
		r.KVTokens = r.KVUsage * r.KVCapacity
	case !known(r.KVUsage) && known(r.KVTokens) && known(r.KVCapacity):
		r.KVUsage = min(r.KVTokens/r.KVCapacity, 1)
	}
	if !known(r.KVUsage) && !known(r.KVTokens) && !known(r.Running) && !known(r.Waiting) {
		if p.rejected > 0 {
			return r, &invalidError{rejected: p.rejected}
		}
		return r, &invalidError{}
	}
	return r, nil
}
