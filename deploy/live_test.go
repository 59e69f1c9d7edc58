package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLivePrometheus runs the whole monitoring path for real: the simulator,
// two kneecap replicas in front of it (one with a small static cap that
// queues and rejects, one with the default cap), and Debian's Prometheus
// scraping both with the rules loaded, all on 127.0.0.1, under a short
// bounded load. Then every dashboard query, every rule expression (each
// vector operand of an alert) and the autoscalers' queries go through
// Prometheus's HTTP API, and each must return a finite value. Metric names
// are checked against what kneecap actually exported.
func TestLivePrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus, the simulator and kneecap; skipped with -short")
	}
	promBin := lookTool(t, "prometheus", "prometheus")
	bin := kneecapBinary(t)
	requireCommand(t, bin, "serve")
	requireCommand(t, bin, "sim")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One client for the whole test, its idle connections closed at the
	// end so that no connection goroutine outlives the test.
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	dir := t.TempDir()
	simAddr, promAddr := freeAddr(t), freeAddr(t)

	// A small share of engine errors, so that the engine-error alert's
	// series exist as they would in production.
	startProc(ctx, t, "sim", bin, nil, "sim", "--listen", simAddr, "--profile", "tiny", "--fault-error-rate", "0.02", "--seed", "7")
	waitHTTP(ctx, t, client, "http://"+simAddr+"/health")

	type replica struct{ pod, traffic, admin string }
	replicas := []replica{{"llm-0", freeAddr(t), freeAddr(t)}, {"llm-1", freeAddr(t), freeAddr(t)}}
	for i, r := range replicas {
		env := []string{
			"KNEECAP_UPSTREAM=http://" + simAddr,
			"KNEECAP_LISTEN=" + r.traffic,
			"KNEECAP_ADMIN_LISTEN=" + r.admin,
			"KNEECAP_SLO_TTFT=1s",
			"KNEECAP_SLO_TPOT=100ms",
			"KNEECAP_DRAIN_TIMEOUT=5s",
			"KNEECAP_LOG_LEVEL=warn",
		}
		if i == 0 {
			env = append(env, "KNEECAP_MAX_CONCURRENCY=2", "KNEECAP_MAX_QUEUE=2")
		}
		startProc(ctx, t, r.pod, bin, env, "serve")
	}
	gw := contract(t)
	for _, r := range replicas {
		waitHTTP(ctx, t, client, "http://"+r.admin+"/readyz")
		for _, route := range gw.adminRoutes {
			checkGET(t, client, "http://"+r.admin+route)
		}
		// The ServiceMonitor's second endpoint: the engine's own metrics
		// through kneecap's traffic port.
		if body := getBody(t, client, "http://"+r.traffic+"/metrics"); !strings.Contains(body, "vllm:") {
			t.Errorf("GET /metrics on kneecap's traffic port does not reach the engine's metrics:\n%.300s", body)
		}
	}

	// Prometheus with the labels a ServiceMonitor gives (so that the KEDA
	// query and the rules' aggregations read as in a cluster), scraping and
	// evaluating every second.
	var targets []string
	for _, r := range replicas {
		targets = append(targets, fmt.Sprintf(`
      - targets: [%q]
        labels: {namespace: default, service: llm, endpoint: admin, container: kneecap, pod: %s}`, r.admin, r.pod))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [kneecap.rules.yaml]
scrape_configs:
  - job_name: llm
    static_configs:%s
`, strings.Join(targets, ""))
	writeFile(t, filepath.Join(dir, "prometheus.yml"), []byte(cfg))
	writeFile(t, filepath.Join(dir, "kneecap.rules.yaml"), readFile(t, filepath.Join(repoRoot(t), rulesFile)))
	startProc(ctx, t, "prometheus", promBin, nil,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr,
		"--log.level=warn")
	waitHTTP(ctx, t, client, "http://"+promAddr+"/-/ready")
	api := promAPI{base: "http://" + promAddr, client: client}

	// Load: a few closed-loop users per replica, streamed and not, until
	// the queries are done; bounded in time and count.
	loadCtx, stopLoad := context.WithTimeout(ctx, 90*time.Second)
	var wg sync.WaitGroup
	var sent, rejected atomic.Int64
	for _, r := range replicas {
		for u := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				users(loadCtx, client, "http://"+r.traffic, u%3 != 0, &sent, &rejected)
			}()
		}
	}
	defer func() {
		stopLoad()
		wg.Wait()
		t.Logf("load: %d requests, %d rejected", sent.Load(), rejected.Load())
	}()

	// Wait until both replicas have been scraped for a while under load and
	// the recorded latency percentiles exist.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := api.finite(ctx, `count(count_over_time(kneecap_running[30s]) >= 10)`) &&
			api.finite(ctx, `count(instance:kneecap_tpot_seconds:quantile1m)`) &&
			api.finite(ctx, `sum(increase(kneecap_rejections_total[1m])) > 0`)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no useful kneecap data after 60s (sent %d, rejected %d)", sent.Load(), rejected.Load())
		}
		time.Sleep(time.Second)
	}

	exported := api.names(ctx, t)
	controller := false
	for n := range exported {
		controller = controller || strings.HasPrefix(n, "kneecap_controller_")
	}
	if !controller {
		t.Log("kneecap exports no kneecap_controller_* metric (static cap, or no adaptive controller yet): the controller row's queries are not required to return data")
	}

	t.Run("exported metrics", func(t *testing.T) {
		for name := range gw.metrics {
			if !exported[name] && !exported[name+"_bucket"] {
				t.Errorf("kneecap does not export %s", name)
			}
		}
		d := loadDashboard(t)
		rec := recordedNames(t)
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				for _, name := range metricNames(q.Expr) {
					if _, ok := rec[name]; ok || exported[name] || exported[name+"_bucket"] {
						continue
					}
					if assumedControllerMetrics[name] && !controller {
						continue
					}
					t.Errorf("panel %q names %s, which kneecap does not export", p.Title, name)
				}
			}
		}
	})

	t.Run("dashboard queries", func(t *testing.T) {
		d := loadDashboard(t)
		for _, p := range d.Panels {
			for _, q := range p.Targets {
				expr := dashboardExpr(q.Expr)
				if p.row == controllerRow && !controller && usesController(expr) {
					continue
				}
				if err := api.requireData(ctx, expr); err != nil {
					t.Errorf("panel %q query %s: %v", p.Title, q.RefID, err)
				}
			}
		}
		for _, v := range d.Templating.List {
			if q, ok := v.Query.(map[string]any); ok {
				// label_values(metric{...}, label): the metric must have the label.
				s, _ := q["query"].(string)
				inner := strings.TrimSuffix(strings.TrimPrefix(s, "label_values("), ")")
				i := strings.LastIndex(inner, ",")
				sel, label := dashboardExpr(inner[:i]), strings.TrimSpace(inner[i+1:])
				if err := api.requireData(ctx, fmt.Sprintf("count by (%s) (%s)", label, sel)); err != nil {
					t.Errorf("variable %s: %v", v.Name, err)
				}
			}
		}
	})

	t.Run("rule expressions", func(t *testing.T) {
		for _, g := range loadRules(t).Groups {
			for _, r := range g.Rules {
				expr := r.Expr.String()
				if r.Record != "" {
					if err := api.requireData(ctx, expr); err != nil {
						t.Errorf("recording rule %s: %v", r.Record, err)
					}
					if err := api.requireData(ctx, r.Record); err != nil {
						t.Errorf("recorded series %s: %v", r.Record, err)
					}
					continue
				}
				for _, op := range vectorOperands(expr) {
					if strings.HasPrefix(op, "kube_") {
						continue // kube-state-metrics: not in this test
					}
					if err := api.requireData(ctx, op); err != nil {
						t.Errorf("alert %s operand %q: %v", r.Alert, op, err)
					}
				}
			}
		}
	})

	t.Run("autoscaler queries", func(t *testing.T) {
		// The KEDA trigger's query as written, and the series
		// prometheus-adapter serves to the HPA (docs/fleet.md).
		so := decodeFile[*scaledObject](t, "deploy/kubernetes/components/keda/scaledobject.yaml")
		if err := api.requireData(ctx, so.Spec.Triggers[0].Metadata["query"]); err != nil {
			t.Errorf("KEDA query: %v", err)
		}
		if err := api.requireData(ctx, `avg_over_time(kneecap_demand_ratio{namespace!="",pod!=""}[2m])`); err != nil {
			t.Errorf("prometheus-adapter series: %v", err)
		}
	})
}

// dashboardExpr fills in the dashboard's variables as "all" would.
func dashboardExpr(expr string) string {
	return strings.NewReplacer(`"$job"`, `".+"`, `"$instance"`, `".+"`, `"$class"`, `".+"`, "$__rate_interval", "15s").Replace(expr)
}

func usesController(expr string) bool {
	for _, n := range metricNames(expr) {
		if assumedControllerMetrics[n] {
			return true
		}
	}
	return false
}

func decodeFile[T any](t *testing.T, rel string) T {
	t.Helper()
	obj, err := decodeStrict(readFile(t, filepath.Join(repoRoot(t), rel)))
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	v, ok := obj.(T)
	if !ok {
		t.Fatalf("%s holds a %T", rel, obj)
	}
	return v
}

// users sends requests one after another until ctx ends (or 2000 requests),
// pausing briefly after a rejection.
func users(ctx context.Context, client *http.Client, base string, stream bool, sent, rejected *atomic.Int64) {
	body := fmt.Sprintf(`{"model":"tiny","stream":%t,"max_tokens":24,"ignore_eos":true,"messages":[{"role":"user","content":%q}]}`,
		stream, strings.Repeat("word ", 40))
	for i := 0; i < 2000 && ctx.Err() == nil; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sent.Add(1)
		if resp.StatusCode == http.StatusTooManyRequests {
			rejected.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

type promAPI struct {
	base   string
	client *http.Client
}

type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

func (p promAPI) query(ctx context.Context, expr string) (promResult, error) {
	var r promResult
	u := p.base + "/api/v1/query?query=" + url.QueryEscape(expr)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return r, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, err
	}
	if r.Status != "success" {
		return r, fmt.Errorf("query %q: %s", expr, r.Error)
	}
	return r, nil
}

// requireData runs expr and requires at least one series with a finite
// value.
func (p promAPI) requireData(ctx context.Context, expr string) error {
	r, err := p.query(ctx, expr)
	if err != nil {
		return err
	}
	if len(r.Data.Result) == 0 {
		return errors.New("no data")
	}
	for _, s := range r.Data.Result {
		if v, ok := s.Value[1].(string); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
				return nil
			}
		}
	}
	return fmt.Errorf("%d series, none with a finite value", len(r.Data.Result))
}

func (p promAPI) finite(ctx context.Context, expr string) bool {
	return p.requireData(ctx, expr) == nil
}

// names returns every metric name Prometheus has scraped.
func (p promAPI) names(ctx context.Context, t *testing.T) map[string]bool {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/label/__name__/values", nil)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return setOf(r.Data...)
}

// requireCommand skips the test when the binary has no such subcommand yet
// (its stream has not landed), and fails under CI.
func requireCommand(t *testing.T, bin, name string) {
	t.Helper()
	out, _ := exec.Command(bin, "help").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("kneecap has no %q command", name)
	}
	t.Skipf("kneecap has no %q command yet", name)
}

// startProc starts a child process that is stopped (SIGTERM, then killed
// after 10s) when the test ends; its output is logged if the test failed.
func startProc(ctx context.Context, t *testing.T, name, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitHTTP polls url until it answers 200, for up to 30s.
func waitHTTP(ctx context.Context, t *testing.T, client *http.Client, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s did not answer 200 within 30s (last error %v)", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func checkGET(t *testing.T, client *http.Client, url string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
	}
}

func getBody(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
