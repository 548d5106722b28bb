package simulate

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/trace"
)

// TestReversalsCount: the counter of PolicyResult.Reversals on sequences of one pod's
// memory (before and after each replacement), replaced at the given steps (minutes).
func TestReversalsCount(t *testing.T) {
	const day = int(ReversalWindow / time.Minute)
	type repl struct {
		step          int
		before, after int64
	}
	cases := []struct {
		name  string
		repls []repl
		want  int
	}{
		{"shrink then grow within a day", []repl{{60, 80, 20}, {71, 20, 50}}, 1},
		{"grow then shrink within a day", []repl{{60, 20, 30}, {200, 30, 25}}, 1},
		{"grow, shrink, grow", []repl{{60, 20, 30}, {200, 30, 25}, {300, 25, 40}}, 2},
		{"two shrinks", []repl{{60, 80, 30}, {900, 30, 20}}, 0},
		{"two growths", []repl{{60, 20, 30}, {70, 30, 40}}, 0},
		{"turn exactly a day later", []repl{{60, 80, 20}, {60 + day, 20, 50}}, 1},
		{"turn more than a day later", []repl{{60, 80, 20}, {61 + day, 20, 50}}, 0},
		// A replacement that keeps the memory (compute only) neither counts nor forgets.
		{"unchanged memory between", []repl{{60, 80, 20}, {100, 20, 20}, {200, 20, 50}}, 1},
		{"unchanged memory only", []repl{{60, 20, 20}, {100, 20, 20}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newReversals(2, time.Minute)
			for _, x := range c.repls {
				r.replaced(1, x.step, x.before, x.after)
			}
			// Another pod's replacements never pair with pod 1's.
			r.replaced(0, c.repls[0].step+1, 10, 5)
			if r.n != c.want {
				t.Errorf("reversals %d, want %d", r.n, c.want)
			}
		})
	}
}

// TestReversalsReported: TestUrgentGrowth's pod, shrunk from its cold start and grown
// back 11 minutes later, is one reversal in every form of the report.
func TestReversalsReported(t *testing.T) {
	mem := append(repeat(20, 70), repeat(45, 20)...)
	tr := trace.Trace{Pods: []trace.Pod{pod("a", 0, mem, repeat(0.2, 90))}}
	res, err := Run(&tr, gpufracOptions())
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Input: "t", Format: "long", Runs: []*Result{res}}
	var js, md, text bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteMarkdown(&md, ""); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Runs []struct {
			Policies []struct {
				Replacements, Reversals *int
			} `json:"policies"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(js.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if p := got.Runs[0].Policies[0]; p.Reversals == nil || *p.Reversals != 1 || p.Replacements == nil || *p.Replacements != 2 {
		t.Errorf("JSON policies %s: want 2 replacements, 1 reversal", js.String())
	}
	for _, want := range []string{"| reversals |", "2 replacements (1 of them reversals)", "reversals: replacements that undo a recent one"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	lines := strings.Split(text.String(), "\n")
	head, row := strings.Fields(lines[1]), strings.Fields(lines[2])
	if !slices.Contains(head, "reversals") || row[len(row)-2] != "1" {
		t.Errorf("text table %q / %q: want a reversals column holding 1", lines[1], lines[2])
	}
}
