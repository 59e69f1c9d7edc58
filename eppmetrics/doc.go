// Package eppmetrics is the pod as an endpoint picker reads it: the model
// server protocol of the Gateway API Inference Extension (an InferencePool
// and its endpoint picker, the EPP, the base of llm-d's router), which
// scrapes each pod's Prometheus metrics for requests waiting and running,
// KV-cache usage and LoRA adapters. An engine that kneecap holds at its
// knee shows a short queue while kneecap queues and refuses in front of it;
// this view counts what the pod really holds, so that the picker sends the
// next request to the pod that can serve it.
//
// # Overview
//
//   - view.go: [Config], [View] and [View.Read], which computes [Numbers]
//     from the limiter (its queue, its running requests, the refused
//     requests it expects back) and the engine's latest reading (package
//     enginemetrics: its own waiting and running, KV usage, LoRA
//     adapters, cache geometry). Waiting is kneecap's queue + the
//     engine's waiting + the refused requests expected back; Running the
//     requests holding a kneecap slot less the engine's own waiting
//     (kneecap's count is exact when scraped; the engine's lags its own
//     scrape). A pod that refuses
//     (refused requests are expected back, or every slot is held and the
//     queue is full, so the next request is refused before it is read)
//     or drains is saturated, not broken: its series stay present and
//     fresh (the picker treats a pod without fresh metrics as gone), and
//     its waiting is at least Config.SaturatedWaiting, the picker's
//     queue-depth threshold, so that its utilization detector reads the
//     pod as full (pool saturation max(waiting / threshold, KV /
//     threshold) per pod) and its filter passes the pod over while
//     another has room.
//   - names.go: [Names], the metric names of an engine family as the
//     picker's defaults read them ([VLLM], [SGLang]).
//   - collector.go: [View.Collector], the kneecap-named series on the
//     admin port (kneecap_epp_requests_waiting, _running, _saturated,
//     kneecap_engine_lora_requests_info, kneecap_engine_cache_config_info),
//     which a picker's configuration names.
//   - handler.go: [View.Handler], GET /metrics on the traffic port in an
//     engine's names (KNEECAP_EPP_METRICS), for a picker left at its
//     defaults, which scrapes the pod's serving port: the engine's body
//     passed through line by line with its waiting and running series
//     replaced, its KV usage written from the reading only where the body
//     has none; whole lines only, so the answer always parses.
//
// Nothing here runs per request or per chunk: every number is computed
// when a scraper asks.
//
// # Concurrency model
//
// A View holds no state of its own: Read takes the limiter's snapshot
// (State, Outside) and the scraper's Latest, each under its owner's lock,
// and is safe for concurrent use. The handler fetches the engine's body
// on the scraping request's goroutine, bounded by its Timeout and
// MaxBytes.
//
// # Ownership
//
// The limiter and the scraper belong to the gateway; the view only reads
// them.
package eppmetrics
