// Package docs holds the checks of the Markdown documentation; it has no code.
package docs

import (
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestRelativeLinks checks every relative link of the repository's Markdown files (git
// ls-files '*.md', outside tools/): the file or directory it names exists, and a
// #fragment into a Markdown file (or the same file) names one of its headings, by
// GitHub's slug rule (Slug), or an explicit <a id/name> anchor.
func TestRelativeLinks(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	anchors := map[string]map[string]bool{} // repo-relative path → anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join("..", path))
		if err != nil {
			return nil, err
		}
		a := Anchors(string(b))
		anchors[path] = a
		return a, nil
	}
	checked := 0
	for _, file := range strings.Fields(string(out)) {
		if strings.HasPrefix(file, "tools/") {
			continue // other projects' modules
		}
		b, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range Links(string(b)) {
			checked++
			target, frag, _ := strings.Cut(l.Target, "#")
			path := file
			if target != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(file), target))
				if _, err := os.Stat(filepath.Join("..", path)); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", file, l.Line, l.Target, path)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", file, l.Line, l.Target, err)
				continue
			}
			if !a[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading whose anchor is #%s", file, l.Line, l.Target, path, frag)
			}
		}
	}
	t.Logf("%d relative links checked", checked)
	if checked < 50 {
		t.Errorf("checked %d links, want the documentation's (hundreds): is the link syntax still parsed?", checked)
	}
}

// Link is one Markdown link: its target and the line it is on (1-based).
type Link struct {
	Target string
	Line   int
}

var (
	linkRe   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRe   = regexp.MustCompile("`[^`]*`")
	headRe   = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlIDRe = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// prose yields the lines of a Markdown document outside fenced code blocks (``` or
// ~~~), with their 0-based index.
func prose(doc string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fenced := false
		for i, line := range strings.Split(doc, "\n") {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
				fenced = !fenced
				continue
			}
			if !fenced && !yield(i, line) {
				return
			}
		}
	}
}

// Links returns the relative links of a Markdown document: inline links [text](target)
// outside fenced code blocks and code spans, whose target is not a URL (scheme:) nor
// an e-mail address.
func Links(doc string) []Link {
	var out []Link
	for i, line := range prose(doc) {
		for _, m := range linkRe.FindAllStringSubmatch(codeRe.ReplaceAllString(line, ""), -1) {
			target := strings.Trim(m[1], "<>")
			if strings.Contains(target, ":") {
				continue // http:, https:, mailto:
			}
			out = append(out, Link{Target: target, Line: i + 1})
		}
	}
	return out
}

// Anchors returns the anchors of a Markdown document: each heading's slug, numbered as
// GitHub numbers repeats (name, name-1, name-2, …), and explicit <a id="…"> or
// <a name="…"> anchors.
func Anchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(doc) {
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := headRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := Slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// Slug is GitHub's anchor of a heading's text: Markdown links reduced to their text,
// lower case, every character that is not a letter, digit, space, hyphen or underscore
// dropped, and spaces made hyphens.
func Slug(heading string) string {
	heading = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"GPUFractionCheckpoint (`gfc`, namespaced)": "gpufractioncheckpoint-gfc-namespaced",
		"`make demo` — a recorded run":              "make-demo--a-recorded-run",
		"Compute under time-slicing":                "compute-under-time-slicing",
		"Status, `kubectl get gsp`, `gpufrac plan`": "status-kubectl-get-gsp-gpufrac-plan",
		"GPUs of several sizes":                     "gpus-of-several-sizes",
		"snake_case and [a link](x.md) 2.0":         "snake_case-and-a-link-20",
	} {
		if got := Slug(in); got != want {
			t.Errorf("Slug(%q) = %q, want %q", in, got, want)
		}
	}
	a := Anchors("# A\n## A\n```\n# not a heading\n```\n### A #\n<a id=\"x-y\"></a>\n")
	for _, want := range []string{"a", "a-1", "a-2", "x-y"} {
		if !a[want] {
			t.Errorf("Anchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Errorf("Anchors: a fenced line counted as a heading: %v", a)
	}
}
