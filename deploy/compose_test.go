package deploy

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// composeFile is the part of the Compose specification deploy/compose uses;
// decoding strictly into it catches a misplaced key.
type composeFile struct {
	Name     string                    `json:"name"`
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build,omitempty"`
	Image           string            `json:"image"`
	Command         []string          `json:"command,omitempty"`
	DependsOn       []string          `json:"depends_on,omitempty"`
	Environment     map[string]string `json:"environment,omitempty"`
	Ports           []string          `json:"ports,omitempty"`
	Volumes         []string          `json:"volumes,omitempty"`
	Profiles        []string          `json:"profiles,omitempty"`
	StopGracePeriod string            `json:"stop_grace_period,omitempty"`
}

type promConfig struct {
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

func loadCompose(t testing.TB) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(repoRoot(t), "deploy/compose/compose.yaml")), &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// TestCompose cross-checks the laptop stack: kneecap's environment and ports
// against the gateway, its upstream against the simulator's listen address,
// Prometheus's target against kneecap's admin port, and every mounted file.
func TestCompose(t *testing.T) {
	c := loadCompose(t)
	gw := contract(t)
	dir := filepath.Join(repoRoot(t), "deploy", "compose")
	for _, name := range []string{"sim", "kneecap", "load", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Fatalf("no service %q", name)
		}
	}
	k := c.Services["kneecap"]
	env := map[string]string{}
	for n, v := range gw.env {
		if v != "" {
			env[n] = v
		}
	}
	for n, v := range k.Environment {
		if _, ok := gw.env[n]; !ok {
			t.Errorf("kneecap env %s: the gateway reads no such variable", n)
		}
		env[n] = v
	}
	for _, e := range []string{"KNEECAP_LISTEN", "KNEECAP_ADMIN_LISTEN"} {
		_, port, _ := net.SplitHostPort(env[e])
		if !containsString(k.Ports, port+":"+port) {
			t.Errorf("kneecap publishes %v, not its %s port %s", k.Ports, e, port)
		}
	}
	up, err := url.Parse(env["KNEECAP_UPSTREAM"])
	if err != nil || up.Hostname() != "sim" {
		t.Fatalf("KNEECAP_UPSTREAM=%q: want the sim service", env["KNEECAP_UPSTREAM"])
	}
	if l := flagValue(c.Services["sim"].Command, "--listen"); l != "0.0.0.0:"+up.Port() {
		t.Errorf("sim listens on %q, kneecap's upstream is port %s", l, up.Port())
	}
	if !strings.HasPrefix(c.Services["sim"].Command[0], "sim") || k.Command[0] != "serve" {
		t.Errorf("sim runs %q, kneecap runs %q", c.Services["sim"].Command, k.Command)
	}
	if b := flagValue(c.Services["load"].Command, "--base-url"); b != "http://kneecap:"+portOf(env["KNEECAP_LISTEN"]) {
		t.Errorf("load --base-url=%q, want kneecap's traffic port", b)
	}

	// Every bind mount's host side exists.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			host, _, _ := strings.Cut(v, ":")
			if _, err := os.Stat(filepath.Join(dir, host)); err != nil {
				t.Errorf("service %s mounts %s: %v", name, host, err)
			}
		}
	}

	var pc promConfig
	if err := yaml.Unmarshal(readFile(t, filepath.Join(dir, "prometheus.yml")), &pc); err != nil {
		t.Fatal(err)
	}
	adminTarget := "kneecap:" + portOf(env["KNEECAP_ADMIN_LISTEN"])
	found := false
	for _, sc := range pc.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			found = found || containsString(st.Targets, adminTarget)
		}
	}
	if !found {
		t.Errorf("prometheus.yml does not scrape %s", adminTarget)
	}
	if !containsString(pc.RuleFiles, filepath.Base(rulesFile)) {
		t.Errorf("prometheus.yml loads rules %v, not %s", pc.RuleFiles, filepath.Base(rulesFile))
	}
	mountsRules := false
	for _, v := range c.Services["prometheus"].Volumes {
		mountsRules = mountsRules || strings.HasPrefix(v, "../prometheus/kneecap.rules.yaml:/etc/prometheus/kneecap.rules.yaml")
	}
	if !mountsRules {
		t.Error("the prometheus service does not mount the rules next to its config")
	}

	ds := string(readFile(t, filepath.Join(dir, "grafana", "datasources.yaml")))
	if !strings.Contains(ds, "url: http://prometheus:9090") {
		t.Error("Grafana's datasource does not point at the prometheus service")
	}
	dash := string(readFile(t, filepath.Join(dir, "grafana", "dashboards.yaml")))
	if !strings.Contains(dash, "path: /var/lib/grafana/dashboards") {
		t.Error("Grafana's dashboard provider does not read where the dashboard is mounted")
	}
}

// TestComposePrometheusConfig runs promtool on the compose stack's
// Prometheus configuration, with the rules beside it as in the container.
func TestComposePrometheusConfig(t *testing.T) {
	promtool := lookTool(t, "promtool", "prometheus")
	root := repoRoot(t)
	tmp := t.TempDir()
	for src, dst := range map[string]string{
		"deploy/compose/prometheus.yml": "prometheus.yml",
		rulesFile:                       filepath.Base(rulesFile),
	} {
		if err := os.WriteFile(filepath.Join(tmp, dst), readFile(t, filepath.Join(root, src)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(promtool, "check", "config", "prometheus.yml")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestComposeCommands runs each compose service's kneecap command line with
// -h appended: every flag it gives must be one the subcommand defines.
// (kneecap serve is configured by environment only and is not run here.)
func TestComposeCommands(t *testing.T) {
	c := loadCompose(t)
	bin := kneecapBinary(t)
	for name, s := range c.Services {
		if s.Image != "kneecap:dev" || len(s.Command) == 0 || s.Command[0] == "serve" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			requireCommand(t, bin, s.Command[0])
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, append(slices.Clone(s.Command), "-h")...).CombinedOutput()
			// -h ends the parse after every flag before it was read: exit 0,
			// or 2 for a command that reports "help requested" as a usage
			// error. A flag the command does not define fails the parse.
			var ee *exec.ExitError
			if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
				t.Fatalf("kneecap %s -h: %v\n%s", strings.Join(s.Command, " "), err, out)
			}
			for _, bad := range []string{"provided but not defined", "invalid value", "flag needs an argument"} {
				if strings.Contains(string(out), bad) {
					t.Errorf("kneecap %s: %s\n%s", strings.Join(s.Command, " "), bad, out)
				}
			}
			if err != nil && !strings.Contains(string(out), "help requested") {
				t.Errorf("kneecap %s -h: %v\n%s", strings.Join(s.Command, " "), err, out)
			}
		})
	}
}
