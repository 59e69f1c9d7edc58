// Package deploy holds the operator kit's checks: kneecap's container image,
// Kubernetes manifests, Prometheus rules, Grafana dashboard and compose file
// live in the folders beside this file, and the tests of this package read
// each of them with the real tool or type that will read it in production.
//
// # Overview
//
//   - kubernetes/: a kustomize base (the engine as a native sidecar, kneecap
//     in front of it, Service, PodDisruptionBudget, ServiceMonitor,
//     PrometheusRule), components for each engine (vLLM, SGLang, llama.cpp's
//     server) and autoscaler (HPA, KEDA), and overlays that combine them.
//     manifest_test.go decodes every file and every rendered overlay
//     strictly into the Kubernetes API types (k8s.io/api, the Prometheus
//     Operator's types, and a small KEDA ScaledObject type of our own), and
//     cross-checks ports, probe paths and environment variables against the
//     gateway's code, so a rename on either side fails a test.
//   - inferencepool/: an InferencePool of pods with kneecap in front of
//     the engine, its endpoint picker reading kneecap's series, and a
//     route that retries a 429 (docs/fleet.md). Its types (the
//     InferencePool's, the Gateway API's, the picker's configuration)
//     come with the picker's module, so its checks live in the module
//     ../epp, which decodes these files strictly and runs the picker's
//     own code against live gateways; this package's walk of kubernetes/
//     does not read them.
//   - prometheus/: recording and alerting rules with promtool unit tests
//     (rules_test.go runs `promtool check rules` and `promtool test rules`).
//   - grafana/: the dashboard (dashboard_test.go).
//   - compose/: the simulator, kneecap, Prometheus and Grafana on a laptop.
//   - ../Dockerfile: dockerfile_test.go runs its build line with the same
//     flags, from a tree filtered by ../.dockerignore, and checks that the
//     binary is static.
//   - live_test.go starts a real Prometheus on 127.0.0.1 that scrapes a
//     running kneecap in front of the simulator under a short load, then runs
//     every dashboard query and rule expression through Prometheus's HTTP
//     API and requires data.
//
// Tests that need a tool (promtool, prometheus, kubectl) skip with a message
// naming it when it is absent, except under CI (CI set in the environment),
// where a missing tool fails: .ci/run installs them.
//
// # Concurrency model
//
// The package has no code outside its tests. The live test runs the
// simulator and the gateway in this process on loopback listeners, and
// Prometheus as a child process that it stops before returning.
//
// # Ownership
//
// The ops stream owns this package, ../Dockerfile, ../.dockerignore and
// ../docs/operating.md. Metric names, environment variables and admin routes
// belong to the gateway: these tests read them from its code and never
// define them.
package deploy
