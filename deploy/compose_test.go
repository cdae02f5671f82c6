package deploy_test

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var replicas = []string{"mcpgate-1", "mcpgate-2"}

// TestCompose: two gateway replicas on the fleet config, waiting for
// PostgreSQL and Redis, behind a proxy that round-robins to both.
func TestCompose(t *testing.T) {
	var c map[string]any
	readYAML(t, "compose.yaml", &c)
	services := mapAt(c, "services")
	for _, s := range append([]string{"proxy", "postgres", "redis", "echo"}, replicas...) {
		if services[s] == nil {
			t.Errorf("compose.yaml: no service %s (have %v)", s, sortedKeys(services))
		}
	}

	fleetCfg, err := os.ReadFile("mcpgate.fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	vars := configVars(string(fleetCfg))
	if len(vars) == 0 {
		t.Fatal("mcpgate.fleet.yaml references no ${VAR}")
	}
	advertised := map[string]bool{}
	for _, name := range replicas {
		s := mapAt(services, name)
		if str(s, "build", "target") != "mcpgate" || str(s, "build", "dockerfile") != "deploy/Dockerfile" {
			t.Errorf("%s: build = %v, want deploy/Dockerfile target mcpgate", name, get(s, "build"))
		}
		for _, dep := range []string{"postgres", "redis"} {
			if str(s, "depends_on", dep, "condition") != "service_healthy" {
				t.Errorf("%s: depends_on %s = %v, want condition service_healthy", name, dep, get(s, "depends_on", dep))
			}
			if get(services, dep, "healthcheck", "test") == nil {
				t.Errorf("%s has no healthcheck, which service_healthy needs", dep)
			}
		}
		if get(s, "read_only") != true || !slices.Contains(listAt(s, "cap_drop"), any("ALL")) {
			t.Errorf("%s: want read_only and cap_drop ALL", name)
		}
		if u := str(s, "user"); u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
			t.Errorf("%s: user %q, want a non-root uid", name, u)
		}
		if !slices.Contains(listAt(s, "volumes"), any("./mcpgate.fleet.yaml:/etc/mcpgate/mcpgate.yaml:ro")) {
			t.Errorf("%s: mcpgate.fleet.yaml not mounted read-only at /etc/mcpgate/mcpgate.yaml: %v", name, get(s, "volumes"))
		}
		if !strings.Contains(strings.Join(stringsOf(listAt(s, "command")), " "), "--config /etc/mcpgate/mcpgate.yaml") {
			t.Errorf("%s: command %v does not load the mounted config", name, get(s, "command"))
		}
		env := mapAt(s, "environment")
		for _, v := range vars {
			if env[v] == nil {
				t.Errorf("%s: mcpgate.fleet.yaml needs ${%s}; the service does not set it", name, v)
			}
		}
		for k, v := range env {
			if secretName.MatchString(k) && !strings.Contains(strval(v), "${") {
				t.Errorf("%s: %s is a plaintext secret; take it from the environment (${VAR})", name, k)
			}
		}
		for _, k := range []string{"MCPGATE_PG_DSN", "MCPGATE_REDIS_URL"} {
			if userinfo.MatchString(str(env, k)) && !strings.Contains(str(env, k), ":${") {
				t.Errorf("%s: %s carries a literal password; take it from the environment", name, k)
			}
		}
		if !strings.Contains(str(env, "MCPGATE_PG_DSN"), "@postgres:") || !strings.Contains(str(env, "MCPGATE_REDIS_URL"), "@redis:") {
			t.Errorf("%s: DSN/URL do not point at the postgres and redis services", name)
		}
		adv := str(env, "MCPGATE_ADVERTISE")
		if adv != "http://"+name+":4000" {
			t.Errorf("%s: MCPGATE_ADVERTISE = %q, want its own address http://%s:4000", name, adv, name)
		}
		advertised[adv] = true
	}
	if len(advertised) != len(replicas) {
		t.Error("replicas advertise the same address")
	}

	proxy := mapAt(services, "proxy")
	if !slices.Contains(listAt(proxy, "volumes"), any("./nginx.conf:/etc/nginx/nginx.conf:ro")) {
		t.Errorf("proxy does not mount nginx.conf: %v", get(proxy, "volumes"))
	}
	for _, r := range replicas {
		if !slices.Contains(stringsOf(listAt(proxy, "depends_on")), r) {
			t.Errorf("proxy does not depend on %s", r)
		}
	}
	if ports := stringsOf(listAt(proxy, "ports")); len(ports) != 1 || !strings.HasSuffix(ports[0], ":4000:8080") {
		t.Errorf("proxy ports = %v, want 4000 published to nginx's 8080", ports)
	}
	checkNginx(t)
	parseConfigTolerant(t, fleetCfg)
	dockerComposeConfig(t)
}

// checkNginx: the upstream lists both replicas, with no balancing method
// (nginx's default, round robin) and no affinity, and the server proxies
// to it, unbuffered for SSE.
func checkNginx(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := stripComments(string(b))
	m := regexp.MustCompile(`(?s)upstream\s+(\S+)\s*\{(.*?)\}`).FindStringSubmatch(conf)
	if m == nil {
		t.Fatal("nginx.conf: no upstream block")
	}
	name, body := m[1], m[2]
	var servers []string
	for _, s := range regexp.MustCompile(`(?m)^\s*server\s+(\S+?)[\s;]`).FindAllStringSubmatch(body, -1) {
		servers = append(servers, s[1])
	}
	want := []string{"mcpgate-1:4000", "mcpgate-2:4000"}
	if !slices.Equal(servers, want) {
		t.Errorf("nginx upstream servers = %v, want %v", servers, want)
	}
	for _, d := range []string{"ip_hash", "hash", "least_conn", "random", "sticky", "least_time", "weight=", "backup"} {
		if regexp.MustCompile(`(^|[\s;])` + regexp.QuoteMeta(d) + `\b`).MatchString(body) {
			t.Errorf("nginx upstream uses %s: want plain round robin over both replicas", d)
		}
	}
	if !regexp.MustCompile(`proxy_pass\s+http://` + regexp.QuoteMeta(name) + `\s*;`).MatchString(conf) {
		t.Errorf("nginx.conf does not proxy_pass to upstream %s", name)
	}
	if !regexp.MustCompile(`proxy_buffering\s+off\s*;`).MatchString(conf) {
		t.Error("nginx.conf buffers responses: SSE streams would stall")
	}
}

func stripComments(s string) string {
	return regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(s, "")
}

// configVars lists the ${VAR}s a config file references, outside comments.
func configVars(cfg string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(stripComments(cfg), -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// dockerComposeConfig runs `docker compose config` when compose is
// installed (it needs no engine).
func dockerComposeConfig(t *testing.T) {
	t.Helper()
	docker, err := exec.LookPath("docker")
	if err != nil || exec.Command(docker, "compose", "version").Run() != nil {
		t.Log("docker compose is not installed: skipping `docker compose config`")
		return
	}
	cmd := exec.Command(docker, "compose", "-f", "compose.yaml", "config", "--quiet")
	cmd.Env = append(os.Environ(),
		"MCPGATE_MASTER_KEY=x", "MCPGATE_SESSION_KEY=x", "MCPGATE_VAULT_KEY=x",
		"POSTGRES_PASSWORD=x", "REDIS_PASSWORD=x")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("docker compose config: %v\n%s", err, out)
	}
}

// dockerfile is deploy/Dockerfile split into stages of instructions.
type stage struct {
	from, name string
	instrs     [][2]string // {INSTRUCTION, arguments}
}

func readDockerfile(t *testing.T) (stages []stage, comments string) {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "#") {
			comments += line + "\n"
			continue
		}
		instr, args, _ := strings.Cut(line, " ")
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(args)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) > 0 {
			st := &stages[len(stages)-1]
			st.instrs = append(st.instrs, [2]string{instr, strings.TrimSpace(args)})
		}
	}
	return stages, comments
}

func (s stage) all(instr string) []string {
	var out []string
	for _, i := range s.instrs {
		if i[0] == instr {
			out = append(out, i[1])
		}
	}
	return out
}

// TestDockerfile: a static, trimmed, versioned build; a final stage that
// runs as non-root on distroless static (or scratch).
func TestDockerfile(t *testing.T) {
	stages, comments := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a multi-stage build", len(stages))
	}
	final := stages[len(stages)-1]
	if final.name != "mcpgate" {
		t.Errorf("final (default) stage is %q, want the gateway, mcpgate", final.name)
	}
	if final.from != "gcr.io/distroless/static-debian12:nonroot" && final.from != "scratch" {
		t.Errorf("final stage FROM %s, want distroless static nonroot or scratch", final.from)
	}
	for _, s := range stages[1:] {
		users := s.all("USER")
		if len(users) == 0 {
			if s.from == "scratch" {
				t.Errorf("stage %s: scratch without USER runs as root", s.name)
			}
			continue
		}
		u := users[len(users)-1]
		if u == "root" || u == "0" || strings.HasPrefix(u, "0:") || strings.HasPrefix(u, "root:") {
			t.Errorf("stage %s: USER %s, want non-root", s.name, u)
		}
	}
	if !slices.Contains(final.all("EXPOSE"), "4000") {
		t.Errorf("final stage EXPOSE %v, want 4000", final.all("EXPOSE"))
	}
	if len(final.all("VOLUME")) == 0 {
		t.Error("final stage declares no data VOLUME")
	}
	// distroless has no shell or curl: the health check is the binary's
	// own `health` command, in exec form.
	checkHealthcheck(t, final)
	if !strings.Contains(comments, "HEALTHCHECK") {
		t.Error("no comment explaining the HEALTHCHECK")
	}
	ep := final.all("ENTRYPOINT")
	if len(ep) != 1 || !strings.HasPrefix(ep[0], "[") {
		t.Errorf("ENTRYPOINT %v, want one in exec form (no shell in the image)", ep)
	}

	build := stages[0]
	var env, runs string
	for _, e := range build.all("ENV") {
		env += " " + e
	}
	for _, r := range build.all("RUN") {
		runs += "\n" + r
	}
	if !strings.Contains(env, "CGO_ENABLED=0") && !strings.Contains(runs, "CGO_ENABLED=0") {
		t.Error("build stage does not set CGO_ENABLED=0")
	}
	gobuild := regexp.MustCompile(`go build [^&]*\./cmd/mcpgate`).FindString(runs)
	if gobuild == "" {
		t.Fatal("build stage does not go build ./cmd/mcpgate")
	}
	for _, flag := range []string{"-trimpath", "-X main.Version="} {
		if !strings.Contains(gobuild, flag) {
			t.Errorf("go build of mcpgate lacks %s: %s", flag, gobuild)
		}
	}
	main, err := os.ReadFile(filepath.Join("..", "cmd", "mcpgate", "main.go"))
	if err != nil || !strings.Contains(string(main), "var Version = ") {
		t.Error("cmd/mcpgate has no var Version for -X main.Version to set")
	}
	for _, pkg := range regexp.MustCompile(`go build [^&]*?(\./\S+)`).FindAllStringSubmatch(runs, -1) {
		if _, err := os.Stat(filepath.Join("..", pkg[1])); err != nil {
			t.Errorf("Dockerfile builds %s, which does not exist", pkg[1])
		}
	}

	ignore, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal("no .dockerignore at the repository root (the build context)")
	}
	lines := strings.Fields(string(ignore))
	for _, keep := range []string{"go.mod", "go.sum", "cmd", "internal", "examples"} {
		if slices.Contains(lines, keep) {
			t.Errorf(".dockerignore excludes %s, which the build needs", keep)
		}
	}
	if !slices.Contains(lines, ".git") {
		t.Error(".dockerignore does not exclude .git")
	}
}

// checkHealthcheck: one HEALTHCHECK, in exec form (no shell needed), that
// runs `mcpgate health` against the address the image serves on.
func checkHealthcheck(t *testing.T, s stage) {
	t.Helper()
	h := s.all("HEALTHCHECK")
	if len(h) != 1 {
		t.Errorf("stage %s: HEALTHCHECK %v, want one", s.name, h)
		return
	}
	_, cmd, ok := strings.Cut(h[0], "CMD ")
	var argv []string
	if !ok || json.Unmarshal([]byte(strings.TrimSpace(cmd)), &argv) != nil {
		t.Errorf("stage %s: HEALTHCHECK %q, want CMD in exec form (a JSON array)", s.name, h[0])
		return
	}
	if len(argv) < 2 || argv[0] != "/usr/local/bin/mcpgate" || argv[1] != "health" {
		t.Errorf("stage %s: HEALTHCHECK runs %v, want /usr/local/bin/mcpgate health", s.name, argv)
	}
	if i := slices.Index(argv, "--url"); i >= 0 && (i+1 >= len(argv) || argv[i+1] != "http://127.0.0.1:4000") {
		t.Errorf("stage %s: HEALTHCHECK %v does not probe the listen address 0.0.0.0:4000 of CMD", s.name, argv)
	}
	for _, opt := range []string{"--interval=", "--timeout="} {
		if !strings.Contains(h[0], opt) {
			t.Errorf("stage %s: HEALTHCHECK lacks %s", s.name, opt)
		}
	}
}

// TestDockerfileRuntimes: the second gateway image, for configs whose
// stdio servers are started with npx or uvx, has node, npx, python3, uv
// and uvx beside the same binary, runs as the same non-root user with the
// same entry point, and is a named target, never the default.
func TestDockerfileRuntimes(t *testing.T) {
	stages, comments := readDockerfile(t)
	byName := map[string]stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	rt, ok := byName["runtimes"]
	if !ok {
		t.Fatal("no runtimes stage")
	}
	final := stages[len(stages)-1]
	if final.name == "runtimes" {
		t.Error("runtimes is the default (last) stage; the default must stay the small distroless image")
	}
	if !strings.HasPrefix(rt.from, "node:") {
		t.Errorf("runtimes FROM %s, want an official node image (node, npm, npx)", rt.from)
	}
	runs := strings.Join(rt.all("RUN"), "\n")
	if !regexp.MustCompile(`apt-get install[^&]*\bpython3\b`).MatchString(runs) {
		t.Errorf("runtimes does not install python3: %s", runs)
	}
	if !strings.Contains(runs, "rm -rf /var/lib/apt/lists") {
		t.Error("runtimes keeps the apt lists in the image")
	}
	copies := rt.all("COPY")
	hasCopy := func(from string, files ...string) bool {
		for _, c := range copies {
			if !strings.Contains(c, "--from="+from+" ") {
				continue
			}
			all := true
			for _, f := range files {
				all = all && slices.Contains(strings.Fields(c), f)
			}
			if all {
				return true
			}
		}
		return false
	}
	uv, ok := byName["uv"]
	if !ok || !strings.HasPrefix(uv.from, "ghcr.io/astral-sh/uv:") {
		t.Errorf("no uv stage from ghcr.io/astral-sh/uv (got %q)", uv.from)
	}
	if !hasCopy("uv", "/uv", "/uvx") {
		t.Errorf("runtimes does not copy /uv and /uvx from the uv stage: %v", copies)
	}
	if !hasCopy("build", "/out/mcpgate", "/usr/local/bin/mcpgate") {
		t.Errorf("runtimes does not copy the gateway binary from the build stage: %v", copies)
	}
	users := rt.all("USER")
	if len(users) == 0 || users[len(users)-1] != "65532:65532" {
		t.Errorf("runtimes USER %v, want 65532:65532 as the default image", users)
	}
	if !regexp.MustCompile(`useradd[^&]*--uid 65532[^&]*--create-home`).MatchString(runs) {
		t.Error("runtimes creates no user 65532 with a home (npm and uv write their caches there)")
	}
	for _, instr := range []string{"ENTRYPOINT", "CMD", "EXPOSE", "VOLUME", "WORKDIR"} {
		if !slices.Equal(rt.all(instr), final.all(instr)) {
			t.Errorf("runtimes %s %v, want the default image's %v", instr, rt.all(instr), final.all(instr))
		}
	}
	checkHealthcheck(t, rt)
	for _, want := range []string{"--target runtimes", "npx", "uvx"} {
		if !strings.Contains(comments, want) {
			t.Errorf("the Dockerfile's comments do not say %q (which image runs npx/uvx servers)", want)
		}
	}
}

// TestStaticBinary builds mcpgate with the Dockerfile's CGO_ENABLED=0 and
// link flags and checks that it is statically linked (it runs on
// distroless static, without libc). The Dockerfile's -trimpath is left
// out: it changes only the file names recorded in the binary, not how it
// links, and it would make the build compile all ~650 packages again
// instead of reusing the suite's build cache (scripts/test.sh runs
// without cgo for the same reason).
func TestStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	out := filepath.Join(t.TempDir(), "mcpgate")
	cmd := exec.Command("go", "build", "-ldflags=-s -w -X main.Version=deploy-test", "-o", out, "../cmd/mcpgate")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Skipf("not an ELF binary on this platform: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("binary is dynamically linked (program header %v)", p.Type)
		}
	}
	v, err := exec.Command(out, "version").Output()
	if err != nil || !strings.Contains(string(v), "mcpgate deploy-test") {
		t.Errorf("mcpgate version = %q (%v), want the -X main.Version value", v, err)
	}
}
