package deploy

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	op   string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t testing.TB, data string) []instruction {
	t.Helper()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue // a comment between continuation lines
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(line)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(op), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// TestDockerfile checks the image's shape against the gateway: a static
// binary built without cgo, a non-root distroless final stage, the binary
// as the entrypoint with serve as the default command, and both of kneecap's
// ports exposed.
func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, string(readFile(t, filepath.Join(repoRoot(t), "Dockerfile"))))
	gw := contract(t)
	var froms []string
	final := map[string]string{}
	for _, in := range ins {
		if in.op == "FROM" {
			froms = append(froms, in.args)
			final = map[string]string{}
			continue
		}
		final[in.op] = in.args
	}
	if len(froms) != 2 {
		t.Fatalf("want a two-stage build, have FROM %q", froms)
	}
	goVersion := goDirective(t)
	if !strings.Contains(froms[0], "golang:"+goVersion+"-") || !strings.HasSuffix(froms[0], " AS build") {
		t.Errorf("build stage %q: want golang:%s-... AS build (go.mod says go %s)", froms[0], goVersion, goVersion)
	}
	if froms[1] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage %q: want distroless static, nonroot", froms[1])
	}
	want := map[string]string{
		"COPY":       "--from=build /out/kneecap /kneecap",
		"USER":       "65532:65532",
		"ENTRYPOINT": `["/kneecap"]`,
		"CMD":        `["serve"]`,
	}
	for op, args := range want {
		if final[op] != args {
			t.Errorf("final stage %s %q, want %q", op, final[op], args)
		}
	}
	var exposed []string
	for _, env := range []string{"KNEECAP_LISTEN", "KNEECAP_ADMIN_LISTEN"} {
		_, port, _ := strings.Cut(gw.env[env], ":")
		exposed = append(exposed, port)
	}
	if got := strings.Fields(final["EXPOSE"]); !slices.Equal(got, exposed) {
		t.Errorf("EXPOSE %q, want kneecap's default ports %q", got, exposed)
	}
	build := buildCommand(t, ins)
	for _, flag := range []string{"CGO_ENABLED=0", "-trimpath", "-o /out/kneecap ./cmd/kneecap"} {
		if !strings.Contains(build, flag) {
			t.Errorf("build command %q lacks %q", build, flag)
		}
	}
}

// buildCommand returns the build stage's `go build` RUN line without its
// BuildKit --mount flags.
func buildCommand(t testing.TB, ins []instruction) string {
	t.Helper()
	for _, in := range ins {
		if in.op != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		fields := strings.Fields(in.args)
		for len(fields) > 0 && strings.HasPrefix(fields[0], "--mount=") {
			fields = fields[1:]
		}
		return strings.Join(fields, " ")
	}
	t.Fatal("Dockerfile has no RUN ... go build")
	return ""
}

func goDirective(t testing.TB) string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, filepath.Join(repoRoot(t), "go.mod"))), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			parts := strings.SplitN(strings.TrimSpace(v), ".", 3)
			return parts[0] + "." + parts[1]
		}
	}
	t.Fatal("go.mod has no go directive")
	return ""
}

// TestDockerBuildIsStatic builds kneecap as the Dockerfile does (see
// kneecapBinary) and reads the result: a static ELF executable (no
// interpreter, no dynamic section) built without cgo and with -trimpath.
func TestDockerBuildIsStatic(t *testing.T) {
	out := kneecapBinary(t)
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("binary has a %v program header: not static", p.Type)
		}
	}
	if f.Section(".dynamic") != nil || f.Section(".interp") != nil {
		t.Error("binary has a .dynamic or .interp section: not static")
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary imports %v", libs)
	}
	bi, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" || settings["GOOS"] != "linux" {
		t.Errorf("build settings %v: want CGO_ENABLED=0, -trimpath, GOOS=linux", settings)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// kneecapBinary builds kneecap once per test run as `docker build` would
// without a Docker engine: from a copy of the build context filtered by
// .dockerignore, with the Dockerfile's own build line and environment.
func kneecapBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the kneecap binary; skipped with -short")
	}
	buildOnce.Do(func() { builtBin, buildErr = dockerBuild(t) })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func dockerBuild(t testing.TB) (string, error) {
	root := repoRoot(t)
	ins := parseDockerfile(t, string(readFile(t, filepath.Join(root, "Dockerfile"))))
	ctx := filepath.Join(binDir, "context")
	if err := os.MkdirAll(ctx, 0o755); err != nil {
		return "", err
	}
	copyContext(t, root, ctx, dockerignore(t, root))
	out := filepath.Join(binDir, "kneecap")
	cmdline := strings.Replace(buildCommand(t, ins), "-o /out/kneecap", "-o "+out, 1)
	cmd := exec.Command("sh", "-c", cmdline)
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH,
		"PATH="+os.Getenv("PATH")+string(os.PathListSeparator)+filepath.Join(runtime.GOROOT(), "bin"))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", cmdline, err, b)
	}
	return out, nil
}

// ignoreRule is one .dockerignore line. Only plain patterns are used (no "!"
// exceptions), which this matcher handles as Docker does: a path is left
// out when it or one of its parent directories matches; "**" matches any
// number of directories.
type ignoreRule []string

func dockerignore(t testing.TB, root string) []ignoreRule {
	t.Helper()
	var rules []ignoreRule
	for _, line := range strings.Split(string(readFile(t, filepath.Join(root, ".dockerignore"))), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore %q: exceptions are not supported by this test's matcher", line)
		}
		rules = append(rules, strings.Split(path.Clean(line), "/"))
	}
	return rules
}

func ignored(rules []ignoreRule, rel string) bool {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for _, r := range rules {
		for n := 1; n <= len(parts); n++ {
			if matchParts(r, parts[:n]) {
				return true
			}
		}
	}
	return false
}

func matchParts(pat, parts []string) bool {
	if len(pat) == 0 {
		return len(parts) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(parts); i++ {
			if matchParts(pat[1:], parts[i:]) {
				return true
			}
		}
		return false
	}
	if len(parts) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], parts[0])
	return ok && matchParts(pat[1:], parts[1:])
}

func TestDockerignoreMatcher(t *testing.T) {
	rules := []ignoreRule{{".git"}, {"deploy"}, {"**", "*.md"}}
	for rel, want := range map[string]bool{
		".git/config": true, "deploy/kubernetes/base/x.yaml": true, "README.md": true,
		"docs/x/y.md": true, "cmd/kneecap/main.go": false, "go.mod": false, "deployer/x.go": false,
	} {
		if got := ignored(rules, rel); got != want {
			t.Errorf("ignored(%q) = %v, want %v", rel, got, want)
		}
	}
}

func copyContext(t testing.TB, root, dst string, rules []ignoreRule) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if ignored(rules, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		o, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(o, in); err != nil {
			o.Close()
			return err
		}
		return o.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
