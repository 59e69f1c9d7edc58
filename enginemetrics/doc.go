// Package enginemetrics reads the engine's own KV-cache occupancy from its
// Prometheus endpoint, every second or so, and keeps the latest reading for
// the gateway's controller, /status and metrics. The gateway cannot see
// what the engine holds in its cache (llama.cpp keeps finished sequences'
// cells, and every step slows with them); the engine publishes it.
//
// # Overview
//
//   - scraper.go: [Config], [New] (passive), [Scraper.Run] (one scrape at
//     once, then one per Interval, each cut at Timeout and at MaxBytes),
//     [Scraper.Latest] (the newest [Reading], ok only while fresh: younger
//     than three intervals), the [State] of the last scrape.
//   - lora.go: [LoRA], vLLM's LoRA adapters as it last published them.
//   - parse.go: a line-by-line parser of the text exposition that looks
//     only at the names below and holds one line at a time (64 KiB at most;
//     longer lines are skipped); values that are NaN, infinite, negative or
//     out of range (a ratio above 1, a count above 1e15) are rejected per
//     field, and a field with a rejected series is unknown (NaN).
//   - status.go: [Scraper.Status] for /status, and the log budget.
//   - metrics.go: kneecap_engine_scrape_up, _scrape_errors_total{reason},
//     _scrape_duration_seconds, and the reading: kneecap_engine_kv_usage_ratio,
//     _kv_tokens, _kv_capacity_tokens, each present only while a fresh
//     reading knows it (absent rather than NaN).
//
// # The names read
//
// The first family of names met in a body decides the engine; names of
// another family in the same body are ignored.
//
//   - vLLM (v1 engine, 0.10 and later: vllm/v1/metrics/loggers.py, labels
//     model_name and engine): vllm:kv_cache_usage_perc (before 0.10 only
//     vllm:gpu_cache_usage_perc, read when the newer name is absent),
//     vllm:cache_config_info (an info gauge; the capacity is its labels
//     num_gpu_blocks x block_size, as CacheConfig.metrics_info writes
//     them; both kept), vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:num_preemptions_total, and
//     vllm:lora_requests_info (an info gauge whose value is when it was
//     written: the newest series is kept as [LoRA], its adapter lists cut
//     at 4 KiB, for the endpoint picker's view in package eppmetrics). KV
//     tokens are usage x capacity, in whole blocks. vLLM's usage counts blocks held by requests: cached blocks
//     no request holds are free.
//   - SGLang (python/sglang/srt/metrics/collector.py, 0.4 and later;
//     labels model_name and ranks): sglang:token_usage,
//     sglang:num_used_tokens, sglang:max_total_num_tokens (newer builds),
//     sglang:num_running_reqs, sglang:num_queue_reqs. Its usage, too,
//     leaves out the radix cache's evictable tokens.
//   - llama.cpp's server (with --metrics): llamacpp:kv_cache_usage_ratio
//     (used cells / n_ctx) and llamacpp:kv_cache_tokens, whose cells
//     include finished sequences kept in the unified cache, and
//     llamacpp:requests_processing, llamacpp:requests_deferred. The two KV
//     names are in builds before llama.cpp PR #13660 (May 2025), which
//     removed them; newer builds publish only the request gauges (the
//     reading then has Running and Waiting, and no KV values). llama.cpp
//     publishes no capacity.
//
// Several series of one name (vLLM's data-parallel engines, SGLang's
// ranks) are combined: counts and capacities are summed, ratios averaged
// (exact when the caches are the same size, as data-parallel ranks' are).
// Missing values are derived where the others allow: tokens = usage x
// capacity, usage = tokens / capacity.
//
// # Failure
//
// A failed scrape has a state: missing (404, 410, 501), status (another
// non-2xx), unreachable, slow (no whole answer within Timeout: a hanging
// endpoint costs one Timeout per Interval, never more), too_large (more
// than MaxBytes: reading stops there), garbled (no known name), invalid
// (known names, no usable value). Each counts in
// kneecap_engine_scrape_errors_total{reason}; the reading is kept until it
// is stale, then Latest answers not ok. A change of state writes one log
// line (a warning into a failure, info into ok), at most four at once and
// then one a minute, so that a flapping endpoint cannot write one a second
// and the state it settles in is still written. Nothing of this touches
// traffic: the scraper has its own connection and goroutine.
//
// # Concurrency model
//
// New starts nothing. Run is one goroutine: it scrapes, sleeps on a ticker
// of the standard time package (so a testing/synctest bubble virtualizes
// it) and scrapes again, one scrape at a time; it returns when its context
// ends, cutting the scrape in progress, and with its own transport closes
// the idle connection, so nothing outlives it. Latest and Status read
// under the Scraper's mutex and are safe for concurrent use, also on a nil
// *Scraper (scraping off).
//
// # Ownership
//
// The Scraper owns its reading, its state, its line buffer and, when
// Config.Transport is nil, its transport. An injected transport belongs to
// the caller (the gateway's, when the engine is reached over pipes). The
// Registerer's metrics are registered once, by New.
package enginemetrics
