// Package epp checks kneecap against the endpoint picker (EPP) of the
// Gateway API Inference Extension with the picker's own code, at the
// version pinned in this module's go.mod. It is a Go module of its own so
// that kneecap's module, and the kneecap binary, take none of the picker's
// dependencies (client-go, controller-runtime): nothing outside this
// folder imports it, and it has no code outside its tests.
//
// # Overview
//
//   - pods_test.go: a pod as the InferencePool has it, live on 127.0.0.1: a
//     simulated vLLM engine (package sim), or any engine handler, and
//     kneecap's gateway in front of it, built by gateway.ConfigFromEnv and
//     gateway.New as `kneecap serve` builds it.
//   - picker_test.go: the picker's metrics data source and core metrics
//     extractor, built by the picker's own factories from the
//     EndpointPickerConfig in deploy/inferencepool/epp.yaml, its legacy
//     metrics client configured by the flags of epp-flags.yaml, and its
//     default vLLM engine config against the traffic port with
//     KNEECAP_EPP_METRICS=vllm, each scraping live pods; its queue scorer
//     and utilization detector (saturation and filter) then judge them: a
//     pod whose kneecap queues reads as waiting, a pod whose kneecap
//     refuses as saturated, and the scorer prefers the pod that is not.
//   - engine_test.go: kneecap in front of an engine with LoRA on (its
//     /metrics as vLLM writes it): the engine's KV usage, LoRA adapters
//     and cache geometry reach the picker's reading, the same three ways.
//   - manifests_test.go: every manifest under deploy/inferencepool decodes
//     strictly into its published Go type (Kubernetes', the InferencePool's,
//     the Gateway API's, and the EndpointPickerConfig through the picker's
//     own loader), and the ports, labels and names they share agree.
//
// # Concurrency model
//
// Each test starts its pods' engines and gateways on loopback listeners
// and stops them before it returns; requests it sends are bounded in
// count and cancelled at its end.
//
// # Ownership
//
// The metric names and environment variables belong to the gateway
// (packages gateway and eppmetrics); these tests read them from there.
package epp
