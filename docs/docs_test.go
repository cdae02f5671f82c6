package docs_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository root, seen from this package's directory.
const root = ".."

// guides are the Markdown files a reader is sent to: the README and every
// docs/*.md but the generated reference, whose layout its generator owns
// (internal/config's tests check its links).
func guides(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil || len(files) < 8 {
		t.Fatalf("found %d guides in docs/ (%v)", len(files), err)
	}
	out := []string{filepath.Join(root, "README.md")}
	for _, f := range files {
		if f != "config.md" {
			out = append(out, f)
		}
	}
	return out
}

// markdownFiles are every Markdown file whose links must resolve.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	out := append(guides(t), "config.md", filepath.Join(root, "SECURITY.md"))
	design, _ := filepath.Glob(filepath.Join("design", "*.md"))
	return append(out, design...)
}

// files caches what read read: the link test reads a target once per link.
var files = map[string]string{}

func read(t *testing.T, path string) string {
	t.Helper()
	if s, ok := files[path]; ok {
		return s
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files[path] = string(b)
	return string(b)
}

var fence = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```[^\\n]*$")

// prose is a Markdown text without its fenced code blocks and inline code,
// where links and headings are read.
func prose(s string) string {
	s = fence.ReplaceAllString(s, "")
	return regexp.MustCompile("`[^`\\n]*`").ReplaceAllStringFunc(s, func(code string) string {
		// Keep the code's text for headings' anchors, without backticks;
		// a link inside inline code is not a link.
		return strings.ReplaceAll(strings.Trim(code, "`"), "](", "] (")
	})
}

var heading = regexp.MustCompile(`(?m)^(#{1,6}) +(.+?) *#*$`)

// slug is the anchor GitHub gives a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces as hyphens.
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	h = regexp.MustCompile(`[^\p{L}\p{N}\- _]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// anchors are the anchors a Markdown file has: its headings' (with -1,
// -2 for repeats) and explicit <a id>s.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose(text), -1) {
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"`).FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

var anchorCache = map[string]map[string]bool{}

func anchorsOf(t *testing.T, path string) map[string]bool {
	if a, ok := anchorCache[path]; ok {
		return a
	}
	a := anchors(read(t, path))
	anchorCache[path] = a
	return a
}

var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestLinksStayInTheRepository: every link of the README and the docs
// resolves: a relative one to a file of the repository (never above its
// root) and, for a Markdown file, to an anchor it has; any other is an
// https link to a public reference, never a placeholder host.
func TestLinksStayInTheRepository(t *testing.T) {
	absRoot, _ := filepath.Abs(root)
	n := 0
	for _, f := range markdownFiles(t) {
		text := read(t, f)
		for _, m := range link.FindAllStringSubmatch(prose(text), -1) {
			n++
			target := m[1]
			if strings.Contains(target, "shared/") {
				t.Errorf("%s: link %s points outside the repository", f, target)
			}
			u, err := url.Parse(target)
			if err != nil {
				t.Errorf("%s: link %q: %v", f, target, err)
				continue
			}
			if u.Scheme != "" {
				host := u.Hostname()
				if u.Scheme != "https" || host == "" || strings.HasSuffix(host, "example.com") ||
					strings.HasSuffix(host, ".internal") || host == "localhost" || host == "127.0.0.1" {
					t.Errorf("%s: link %s is not a public https reference", f, target)
				}
				continue
			}
			dest := f
			if u.Path != "" {
				dest = filepath.Join(filepath.Dir(f), filepath.FromSlash(u.Path))
				abs, _ := filepath.Abs(dest)
				if abs != absRoot && !strings.HasPrefix(abs, absRoot+string(filepath.Separator)) {
					t.Errorf("%s: link %s leaves the repository", f, target)
					continue
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %s: %v", f, target, err)
					continue
				}
			}
			if u.Fragment != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(t, dest)[u.Fragment] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", f, target, dest, u.Fragment)
			}
		}
	}
	if n < 100 {
		t.Errorf("found only %d links; the link pattern is broken", n)
	}
}

// TestGuidesHaveContents: every guide opens with a table of contents that
// links each of its sections, in order.
func TestGuidesHaveContents(t *testing.T) {
	for _, f := range guides(t) {
		text := prose(read(t, f))
		var sections []string
		for _, m := range heading.FindAllStringSubmatch(text, -1) {
			if len(m[1]) == 2 && m[2] != "Contents" {
				sections = append(sections, slug(m[2]))
			}
		}
		_, after, ok := strings.Cut(text, "\n## Contents\n")
		if !ok {
			t.Errorf("%s: no ## Contents", f)
			continue
		}
		toc, _, _ := strings.Cut(after, "\n## ")
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^- \[.*\]\(#([^)]+)\)`).FindAllStringSubmatch(toc, -1) {
			listed = append(listed, m[1])
		}
		if !slices.Equal(listed, sections) {
			t.Errorf("%s: contents list %v, want its sections %v", f, listed, sections)
		}
	}
}

// TestNoUnexplainedRuleCodes: the README and the guides say a rule in
// words (or link the page that does), never by a bare code of a
// specification the repository does not hold (S16.4, C4.2). The generated
// reference and the design notes are held elsewhere.
func TestNoUnexplainedRuleCodes(t *testing.T) {
	code := regexp.MustCompile(`\b(SPEC\s+)?[SC][0-9]{1,2}(\.[0-9]+)*\b`)
	for _, f := range guides(t) {
		for i, line := range strings.Split(read(t, f), "\n") {
			if m := code.FindString(line); m != "" {
				t.Errorf("%s:%d: rule code %q: say the rule in words", f, i+1, m)
			}
		}
	}
}

// TestREADME: the README is a short front page whose commands work in
// this repository: the install path is the module's, the quickstart and
// the test command exist, and it links every guide.
func TestREADME(t *testing.T) {
	readme := read(t, filepath.Join(root, "README.md"))
	if n := strings.Count(readme, "\n"); n > 200 {
		t.Errorf("README has %d lines; it is the front page, the rest belongs in docs/", n)
	}
	for _, want := range []string{"## Install", "## Quickstart", "## Connect a client", "## Test", "## Guides"} {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(want) + `$`).MatchString(readme) {
			t.Errorf("README has no section %q", want)
		}
	}
	if !strings.Contains(readme, "```mermaid\n") {
		t.Error("README has no diagram")
	}
	for _, client := range []string{"Claude Code", "Cursor", "VS Code", "SDK"} {
		_, connect, _ := strings.Cut(readme, "## Connect a client")
		connect, _, _ = strings.Cut(connect, "\n## ")
		if !strings.Contains(connect, client) {
			t.Errorf("README's Connect a client does not show %s", client)
		}
	}

	// go install names the module's own command.
	mod := regexp.MustCompile(`(?m)^module (\S+)$`).FindStringSubmatch(read(t, filepath.Join(root, "go.mod")))
	if mod == nil {
		t.Fatal("go.mod has no module line")
	}
	install := "go install " + mod[1] + "/cmd/mcpgate@latest"
	if !strings.Contains(readme, install) {
		t.Errorf("README does not show %q", install)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "mcpgate", "main.go")); err != nil {
		t.Errorf("the installed command: %v", err)
	}

	// The quickstart is a program of this repository.
	if !strings.Contains(readme, "go run ./examples/quickstart") {
		t.Error("README does not show go run ./examples/quickstart")
	}
	if _, err := os.Stat(filepath.Join(root, "examples", "quickstart", "main.go")); err != nil {
		t.Errorf("examples/quickstart: %v", err)
	}
	if !strings.Contains(readme, "http://127.0.0.1:4000/ui/") {
		t.Error("README's quickstart does not say where the console is")
	}
	if !strings.Contains(read(t, filepath.Join(root, "examples", "quickstart.yaml")), "listen: 127.0.0.1:4000") {
		t.Error("the quickstart config does not listen where the README says")
	}

	// The test command is the one CI runs.
	if !regexp.MustCompile("(?m)^bash scripts/test.sh$").MatchString(readme) {
		t.Error("README does not show the test command bash scripts/test.sh on a line of its own")
	}
	if !regexp.MustCompile(`(?m)^exec bash scripts/test.sh$`).MatchString(read(t, filepath.Join(root, ".ci", "run"))) {
		t.Error(".ci/run does not run the README's test command")
	}

	// Every guide is linked from the front page.
	for _, f := range append(guides(t)[1:], "config.md") {
		if !strings.Contains(readme, "](docs/"+f+")") {
			t.Errorf("README does not link docs/%s", f)
		}
	}
}

// TestDeployGuide: the deploy guide says which image runs npx/uvx stdio
// servers, with the Dockerfile target that builds it, and shows go install.
func TestDeployGuide(t *testing.T) {
	deploy := read(t, "deploy.md")
	dockerfile := read(t, filepath.Join(root, "deploy", "Dockerfile"))
	for _, target := range []string{"runtimes", "mcpgate"} {
		if !regexp.MustCompile(`(?mi)^FROM \S+ AS ` + target + `$`).MatchString(dockerfile) {
			t.Errorf("the Dockerfile has no target %s", target)
		}
	}
	for _, want := range []string{"--target runtimes", "npx", "uvx", "distroless", "cannot run an `npx` or `uvx` stdio server",
		"go install github.com/mcpgate/mcpgate/cmd/mcpgate@latest", "mcpgate health", "helm test", "values.schema.json", "strategy: Recreate"} {
		if !strings.Contains(deploy, want) {
			t.Errorf("docs/deploy.md does not say %q", want)
		}
	}
}
