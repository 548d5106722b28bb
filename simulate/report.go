package simulate

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/backend"
)

// GenTD26Citation is the citation of the GenTD26 trace, for reports computed from it.
const GenTD26Citation = `Alibaba GenTD26 ("GenAI Serving Top-Down Dataset 2026", cluster-trace-v2026-GenAI in the public Alibaba cluster data repository), published with Lin et al., "Understanding Diffusion Model Serving in Production: A Top-Down Analysis of Workload, Scheduling, and Resource Efficiency", ACM Symposium on Cloud Computing (SoCC) 2025.`

// Report is the output of one simulate command: the input and one Result per GPU size.
type Report struct {
	// Input names the trace (a directory or file, or "synthetic").
	Input string `json:"input"`
	// Format is the trace format: gentd26, long or synthetic.
	Format string `json:"format"`
	// Command is the command line that produced the report (for Markdown), optional.
	Command string `json:"command,omitempty"`
	// Warnings say what the reader left out of the trace and why (values out of
	// range: "FILE:LINE: compute_ratio 45 is above 1…; skipped, N of the M compute
	// values in all"); the report is computed without those values.
	Warnings []string `json:"warnings,omitempty"`
	// Runs holds one simulation per GPU size.
	Runs []*Result `json:"runs"`
	// Plots lists the plot files per run (same order as Runs), set by the caller after
	// WritePlots; Markdown links them relative to its own file.
	Plots [][]PlotFile `json:"plots,omitempty"`
}

// PlotFile is one written plot: its path and what it shows.
type PlotFile struct {
	// Path is the file written (the first of the requested formats).
	Path string `json:"path"`
	// Title says what the plot shows; Markdown uses it as the image's text.
	Title string `json:"title"`
}

// GiB renders bytes as a Kubernetes binary quantity: "80Gi" for 80 GiB, "1536Mi" for
// 1.5 GiB.
func GiB(bytes int64) string { return resource.NewQuantity(bytes, resource.BinarySI).String() }

// ShortDuration drops zero minute and second parts from a time.Duration string:
// "12h0m0s" → "12h", "1h30m0s" → "1h30m", "0s" stays.
func ShortDuration(d string) string {
	if d == "0s" {
		return d
	}
	if s, ok := strings.CutSuffix(d, "m0s"); ok {
		d = s + "m"
	}
	if s, ok := strings.CutSuffix(d, "h0m"); ok {
		d = s + "h"
	}
	return d
}

// MarshalJSON writes the result with null for what is unknown, not 0: vsClairvoyant
// when clairvoyant-memory was not simulated, computeUtilisation, contentionPodMinutes
// and contentionShare when the trace has no compute sample (ComputeKnown false).
func (p PolicyResult) MarshalJSON() ([]byte, error) {
	type plain PolicyResult // without this method
	known := func(v float64, ok bool) *float64 {
		if !ok {
			return nil
		}
		return &v
	}
	return json.Marshal(struct {
		plain
		VsClairvoyant        *float64 `json:"vsClairvoyant"`
		ContentionPodMinutes *float64 `json:"contentionPodMinutes"`
		ContentionShare      *float64 `json:"contentionShare"`
		ComputeUtilisation   *float64 `json:"computeUtilisation"`
	}{plain(p), known(p.VsClairvoyant, p.VsClairvoyant > 0), known(p.ContentionPodMinutes, p.ComputeKnown),
		known(p.ContentionShare, p.ComputeKnown), known(p.ComputeUtilisation, p.ComputeKnown)})
}

// WriteJSON writes the report as indented JSON; it returns the writer's error.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Heading names the run: GPU size, the warm-up when there is one, and the backend when
// it writes a request and a limit (or, on the annotations backend, that it writes no
// memory request).
func (res *Result) Heading() string {
	h := GiB(res.GPUMemoryBytes) + " GPUs"
	if res.Settings.WarmUp != "0s" {
		h += ", after " + ShortDuration(res.Settings.WarmUp) + " of history"
	}
	if s := res.Settings; s.Backend != "" {
		h += fmt.Sprintf(", %s (request %s, limit %s)", s.Backend, s.NVFractionsRequest, s.NVFractionsLimit)
	} else if s.AnnotationMemoryRequest == backend.AnnotationsMemoryRequestNone {
		h += ", no memory request (placed by the limit)"
	}
	return h
}

// WriteText writes one plain-text table per run; it returns the writer's error.
func (r *Report) WriteText(w io.Writer) error {
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	for i, res := range r.Runs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		t := res.Trace
		fmt.Fprintf(w, "%s; %s: %d pods (%d lifetimes), %d workloads, %s to %s, evaluated from %s (%d of %d steps of %s)%s\n",
			res.Heading(), r.Input, t.TracePods, t.Pods, t.Workloads, t.Start.Format(time.RFC3339), t.End.Format(time.RFC3339),
			t.EvaluatedFrom.Format(time.RFC3339), t.EvaluatedSteps, t.Steps, res.Settings.Step, computeNote(t))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		head, rows := tableRows(res)
		fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// computeNote says, after a run's heading, which compute figures are incomplete or
// unknown, and which pods no GPU of the run's size holds: "" when neither.
func computeNote(t TraceInfo) string {
	var note string
	switch {
	case t.PodsWithoutCompute == 0:
	case t.PodsWithoutCompute == t.TracePods:
		note = "; no compute samples: compute util and contention unknown (-)"
	default:
		note = fmt.Sprintf("; %d of %d pods without compute samples count as idle in compute util and contention", t.PodsWithoutCompute, t.TracePods)
	}
	if t.PodsAboveGPU > 0 {
		note += fmt.Sprintf("; %d of %d pods use more memory than one GPU and overrun under every policy (--gpu-memory too small for this trace?)", t.PodsAboveGPU, t.TracePods)
	}
	return note
}

// tableRows renders the table of one result.
func tableRows(res *Result) ([]string, [][]string) {
	head := []string{"policy", "GPU-min", "vs 1/pod", "vs clairv.", "peak GPUs", "pod OOM pod-min (pods)", "of which warm-up",
		"GPU OOM GPU-min (pod-min)", "contention pod-min (%)", "mem util", "compute util", "replacements", "reversals", "cold-start pod-min"}
	var rows [][]string
	for _, p := range res.Policies {
		vs, contention, compute := "-", "-", "-"
		if p.VsClairvoyant > 0 {
			vs = fmt.Sprintf("%.2f", p.VsClairvoyant)
		}
		if p.ComputeKnown {
			contention = fmt.Sprintf("%.0f (%.2f%%)", p.ContentionPodMinutes, 100*p.ContentionShare)
			compute = fmt.Sprintf("%.0f%%", 100*p.ComputeUtilisation)
		}
		rows = append(rows, []string{
			p.Policy,
			fmt.Sprintf("%.0f", p.GPUMinutes),
			fmt.Sprintf("%.2f", p.GPUsPerPod),
			vs,
			fmt.Sprint(p.PeakGPUs),
			fmt.Sprintf("%.0f (%d)", p.PodLimitOverrunMinutes, p.PodsWithOverrun),
			fmt.Sprintf("%.0f", p.WarmUpOverrunMinutes),
			fmt.Sprintf("%.0f (%.0f)", p.GPUOverrunMinutes, p.GPUOverrunPodMinutes),
			contention,
			fmt.Sprintf("%.0f%%", 100*p.MemoryUtilisation),
			compute,
			fmt.Sprint(p.Replacements),
			fmt.Sprint(p.Reversals),
			fmt.Sprintf("%.0f", p.ColdStartPodMinutes),
		})
	}
	return head, rows
}

// WriteMarkdown writes the report as a Markdown document: how it was made, the data
// citation (GenTD26), definitions, and per GPU size the table, findings computed from
// the numbers, and the plots. dir is the directory the document is written to; plot
// links are relative to it. It returns the writer's error.
func (r *Report) WriteMarkdown(w io.Writer, dir string) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# What-if simulation: GPU fractions on %s\n\n", r.title())
	b.WriteString("Generated by `gpufrac simulate`; do not edit by hand")
	if r.Command != "" {
		fmt.Fprintf(b, ". Regenerate with:\n\n```\n%s\n```\n\n", r.Command)
	} else {
		b.WriteString(".\n\n")
	}
	if r.Format == "gentd26" {
		fmt.Fprintf(b, "**Data.** %s The publishers anonymised the trace (shifted times, possibly scaled values); this run uses the development subset of the pods kept in the project's shared data folder.\n\n", GenTD26Citation)
	}
	if len(r.Runs) > 0 {
		res := r.Runs[0]
		t, s := res.Trace, res.Settings
		lives := "each running from its first sample to its last; a gap in its samples is an exporter gap, not an end"
		if s.Lookback != "0s" {
			lives = fmt.Sprintf("%d pod lifetimes after splitting at gaps over %s", t.Pods, ShortDuration(s.Lookback))
		}
		fmt.Fprintf(b, "**Trace.** %d trace pods (%s) in %d Deployments, %s to %s (%.1f h).\n\n",
			t.TracePods, lives, t.Workloads, t.Start.Format(time.RFC3339), t.End.Format(time.RFC3339),
			t.End.Sub(t.Start).Hours())
		win := "none (shrink at any time)"
		if len(s.ResizeWindows) > 0 {
			var ws []string
			for _, rw := range s.ResizeWindows {
				ws = append(ws, fmt.Sprintf("`%s` for %s", rw.Schedule, ShortDuration(rw.Duration.Duration.String())))
			}
			win = strings.Join(ws, ", ")
		}
		fmt.Fprintf(b, "**Settings.** Step (recommender cycle) %s; gpufrac: recommender defaults, memory headroom %d %%, memory aggregation interval %s, full confidence after %s of history, cold start (a whole GPU) below confidence %.2f. Updater (its own defaults and decision code): minimum pod age %s inside the bounds, at most %g replacements per minute cluster-wide, replace outside [lowerBound, upperBound] or at ≥ %.0f %% from target, protective growth (out of memory, peak ≥ %.0f %% of the allocation) urgent %v, a change inside the bounds seen %d cycles over %s and rounds of replacements %s apart, resize windows %s, min replicas %d.\n\n",
			ShortDuration(s.Step), s.MemoryHeadroomPercent, ShortDuration(s.MemoryAggregationInterval), ShortDuration(s.FullConfidenceHistory), s.LowConfidence,
			ShortDuration(s.MinLifetime), s.ReplacementsPerMinute, 100*s.ChangeThreshold, 100*s.NearLimit, s.UrgentGrowth, s.PersistCycles, ShortDuration(s.PersistFor), ShortDuration(s.MinReplacementInterval), win, s.MinReplicas)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(b, "**Warning.** %s.\n\n", warn)
	}
	b.WriteString(markdownDefinitions)
	for i, res := range r.Runs {
		fmt.Fprintf(b, "\n## %s\n\n", res.Heading())
		if res.Settings.WarmUp != "0s" {
			w := ShortDuration(res.Settings.WarmUp)
			fmt.Fprintf(b, "gpufrac installed %s into the trace: the recommenders read the first %s as history (as the recommender bootstraps from Prometheus), and placing and counting start at %s. Pods alive then are placed in trace order.\n\n",
				w, w, res.Trace.EvaluatedFrom.Format(time.RFC3339))
		} else {
			b.WriteString("gpufrac installed when the trace starts: no history, so every workload starts on the cold-start allocation.\n\n")
		}
		if note := computeNote(res.Trace); note != "" {
			b.WriteString(strings.ToUpper(note[2:3]) + note[3:] + ".\n\n")
		}
		head, rows := tableRows(res)
		b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
		for range head {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, row := range rows {
			row[0] = "`" + row[0] + "`"
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
		b.WriteString("\n")
		for _, f := range findings(res) {
			b.WriteString("- " + f + "\n")
		}
		if i < len(r.Plots) {
			b.WriteString("\n")
			for _, p := range r.Plots[i] {
				rel := p.Path
				if dir != "" {
					if rp, err := filepath.Rel(dir, p.Path); err == nil {
						rel = rp
					}
				}
				fmt.Fprintf(b, "![%s](%s)\n\n", p.Title, filepath.ToSlash(rel))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) title() string {
	switch r.Format {
	case "gentd26":
		return "the GenTD26 production trace"
	case "synthetic":
		return "a synthetic trace"
	}
	return "`" + r.Input + "`"
}

const markdownDefinitions = "**Policies.**\n\n" +
	"- `one-per-pod`: a whole GPU per pod (today's practice).\n" +
	"- `time-slicing-N`: the device plugin's N equal replicas per GPU, each pod 1/N of memory and compute, no sizing.\n" +
	"- `vpa-memory`: GPU memory sized as VPA sizes container memory (p90 of per-pod daily peaks × 1.15 in VPA's decaying histogram, k8s.io/autoscaler/vertical-pod-autoscaler/pkg/recommender/util), compute not partitioned, the updater's decision (updater.Evaluate) without the near-limit rule VPA lacks, same cold start as gpufrac.\n" +
	"- `gpufrac`: the recommender's own estimator and policy (history.Model fed at every cycle, recommend.Config.Recommend), the updater's own decision (updater.Evaluate, updater.Admissible) and what the admission webhook writes.\n" +
	"- `clairvoyant-peak`: each pod gets its true future peak memory and peak compute (per-minute mean) as hard limits when it starts; same packer, no migration. Forbidding contention makes it no lower bound.\n" +
	"- `clairvoyant-memory`: true peak memory, compute not partitioned: the fewest GPUs that sizing pods once at start can hold without a memory overrun.\n" +
	"- `clairvoyant-seen-peak`: as clairvoyant-memory, but never below the highest memory the pod's workload had shown before the pod was placed (history before the install included): the bound of a policy that sizes pods once and keeps every peak it has seen, as gpufrac's memory request and target do for the peak window (7 days). Knowing the future rather than the past is what separates it from clairvoyant-memory.\n\n" +
	"A policy that resizes pods during their life can hold fewer GPU-minutes than these start-time bounds.\n\n" +
	"**Columns.** GPU-min: GPU-minutes held (a GPU counts while any tenant lives). " +
	"vs 1/pod, vs clairv.: ratio of GPU-minutes to `one-per-pod` and to the `clairvoyant-memory` bound. " +
	"pod OOM: pod-minutes whose actual memory exceeded the pod's allocation (a crash under an enforcing backend such as HAMi), and the pods affected; " +
	"of which warm-up: those whose allocation came from a recommendation on less history than the full-confidence history (default 24h; VPA: one day). " +
	"GPU OOM: GPU-minutes whose tenants' actual memory summed above the GPU (pods are packed by their memory request, which may be below their limit), and the pod-minutes of their tenants, each at risk of an out-of-memory crash. " +
	"contention: pod-minutes on GPUs whose tenants' actual utilisation summed above 100 %, and their share of all pod-minutes. " +
	"mem util, compute util: mean actual memory and utilisation of the GPUs held. " +
	"replacements: pods replaced to change their fraction. " +
	"reversals: replacements that undo a recent one (flapping): the memory written into the pod (its target, which the updater compares) moves opposite to its previous replacement that moved it, made at most 24 h before (a pod grown then shrunk back, or shrunk then grown; a cold start's whole GPU is the memory before its first replacement). " +
	"cold-start: pod-minutes on a whole GPU because the workload's recommendation was not yet confident.\n\n" +
	"**Packer.** Best fit by free memory among GPUs in use with enough free memory and compute (sum of compute allocations ≤ 1), else a new GPU; pods never move; a replaced pod is placed again like a new one. " +
	"gpufrac and vpa-memory pods are packed by the memory request the backend writes and run out of memory above their limit: on the default annotations backend the request is `gpufrac.io/gpu-memory-request`, the observed peak when below the target, and the limit the target (vpa-memory knows no observed peak, so its request stays its target); where the heading says no memory request, both are the target. " +
	"Usage is the trace's: co-location does not change it, replacements cost no downtime, overruns do not restart pods (for gpufrac each is an out-of-memory exit, which raises the workload's rollback floor as the updater does), and latency is not modelled.\n"

// findings returns sentences computed from a result: the gpufrac policy against the
// clairvoyant bound and the trace's one-per-pod practice.
func findings(res *Result) []string {
	get := func(name string) *PolicyResult {
		for i := range res.Policies {
			if res.Policies[i].Policy == name {
				return &res.Policies[i]
			}
		}
		return nil
	}
	var out []string
	one, gf, cl, clm, cls := get(PolicyOnePerPod), get(PolicyGPUFrac), get(PolicyClairvoyant), get(PolicyClairvoyantMemory), get(PolicyClairvoyantSeen)
	if cl != nil && one != nil && one.GPUMinutes > 0 {
		out = append(out, fmt.Sprintf("Reserving every pod's true peak memory and compute (clairvoyant-peak) holds %.0f %% of one-per-pod's GPU-minutes.", 100*cl.GPUMinutes/one.GPUMinutes))
	}
	if clm != nil && one != nil && one.GPUMinutes > 0 {
		out = append(out, fmt.Sprintf("Sizing memory alone to the true peak (clairvoyant-memory) holds %.0f %%.", 100*clm.GPUMinutes/one.GPUMinutes))
	}
	if cls != nil && clm != nil && clm.GPUMinutes > 0 {
		out = append(out, fmt.Sprintf("Never sizing a pod below the memory its workload had shown (clairvoyant-seen-peak) holds %.2f× clairvoyant-memory: what knowing only the past costs a policy that sizes pods once.", cls.GPUMinutes/clm.GPUMinutes))
	}
	if gf == nil {
		return out
	}
	if one != nil && one.GPUMinutes > 0 {
		out = append(out, fmt.Sprintf("gpufrac holds %.0f %% of one-per-pod's GPU-minutes; %.0f of its %.0f pod-minutes (%.0f %%) are cold starts on a whole GPU.",
			100*gf.GPUMinutes/one.GPUMinutes, gf.ColdStartPodMinutes, gf.PodMinutes, 100*gf.ColdStartPodMinutes/math.Max(1, gf.PodMinutes)))
	}
	if clm != nil && clm.GPUMinutes > 0 {
		line := fmt.Sprintf("gpufrac holds %.2f× the GPU-minutes of clairvoyant-memory", gf.GPUMinutes/clm.GPUMinutes)
		if cls != nil && cls.GPUMinutes > 0 {
			line += fmt.Sprintf(" and %.2f× those of clairvoyant-seen-peak", gf.GPUMinutes/cls.GPUMinutes)
		}
		out = append(out, line+".")
	}
	contention := "contention unknown (no compute samples)"
	if gf.ComputeKnown {
		contention = fmt.Sprintf("contention in %.2f %% of pod-minutes", 100*gf.ContentionShare)
	}
	out = append(out, fmt.Sprintf("gpufrac: %.0f pod-minutes over the pod's memory allocation in %d pods (%.0f of them while the workload's history was shorter than the full-confidence history), %.0f GPU-minutes over the GPU's memory (%.0f pod-minutes at risk), %s, %d replacements (%d of them reversals).",
		gf.PodLimitOverrunMinutes, gf.PodsWithOverrun, gf.WarmUpOverrunMinutes, gf.GPUOverrunMinutes, gf.GPUOverrunPodMinutes, contention, gf.Replacements, gf.Reversals))
	return out
}
