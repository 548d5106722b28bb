package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpufrac/gpufrac/e2e/framework"
)

// serverGoal is issue 17's goal for gpufrac's server-side p99 at 200 pods/s.
const serverGoal = 5 * time.Millisecond

// percentile returns quantile q (0–1) of d by the nearest-rank method (0 when empty).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(len(s)-1, i))]
}

// histQuantile formats quantile q of h: interpolated inside its bucket as PromQL's
// histogram_quantile does, or "≤ bound" when it falls in the first bucket (where
// interpolation would only echo the bucket's width; VPA's first is 10 ms).
func histQuantile(h framework.Histogram, q float64) string {
	if h.Count == 0 {
		return "–"
	}
	ub := h.UpperBound(q)
	if len(h.Bounds) > 0 && ub == h.Bounds[0] {
		return "≤ " + fmtSeconds(ub)
	}
	return fmtSeconds(h.Quantile(q))
}

func fmtSeconds(s float64) string {
	if math.IsInf(s, 1) {
		return "+Inf"
	}
	return fmtDuration(time.Duration(s * float64(time.Second)))
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	}
}

// markdown renders one table per rate, a column per target, and the goals' verdicts.
func markdown(o options, results map[float64][]*result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d pods per run, %d runs per webhook and rate, at most %d creations in flight.\n", o.pods, o.repeats, o.maxInFlight)
	if len(o.gpufracEnv) > 0 {
		fmt.Fprintf(&b, "gpufrac's webhook ran with %s in its environment.\n", strings.Join(o.gpufracEnv, " "))
	}
	for _, r := range o.rates {
		res := results[r]
		fmt.Fprintf(&b, "\n### %g pods/s\n\n| | %s |\n|---|%s\n", r, strings.Join(columnNames(res), " | "), strings.Repeat("---|", len(res)))
		row := func(name string, f func(*result) string) {
			cells := make([]string, len(res))
			for i, x := range res {
				cells[i] = f(x)
			}
			fmt.Fprintf(&b, "| %s | %s |\n", name, strings.Join(cells, " | "))
		}
		row("pods created (failed)", func(x *result) string { return fmt.Sprintf("%d (%d)", x.created, x.failed) })
		row("sampled pods not as the webhook should leave them", func(x *result) string {
			if x.target.webhookName == "" {
				return "–"
			}
			return fmt.Sprint(x.unpatch)
		})
		row("achieved rate, pods/s (per run)", func(x *result) string { return joinFloats(x.achieved) })
		row("pod-create p50, client", func(x *result) string { return fmtDuration(percentile(x.lat, 0.5)) })
		row("**pod-create p99, client**", func(x *result) string { return "**" + fmtDuration(percentile(x.lat, 0.99)) + "**" })
		row("pod-create p99 per run", func(x *result) string { return joinDurations(x.runP99) })
		row("webhook server-side p50 (own metric)", func(x *result) string { return histQuantile(x.server, 0.5) })
		row("**webhook server-side p99 (own metric)**", func(x *result) string { return "**" + histQuantile(x.server, 0.99) + "**" })
		row("server-side ≤ 5 ms (own metric)", func(x *result) string {
			if x.server.Count == 0 || x.server.Bounds[0] > serverGoal.Seconds() {
				return "–"
			}
			return fmt.Sprintf("%.1f %%", 100*x.server.FractionBelow(serverGoal.Seconds()))
		})
		row("API server's webhook call p50 / p99", func(x *result) string {
			return histQuantile(x.apiCall, 0.5) + " / " + histQuantile(x.apiCall, 0.99)
		})
		row("matchConditions p50 / p99 (API server)", func(x *result) string {
			return histQuantile(x.match, 0.5) + " / " + histQuantile(x.match, 0.99)
		})
		b.WriteString("\n" + verdicts(r, res))
	}
	return b.String()
}

func columnNames(res []*result) []string {
	out := make([]string, len(res))
	for i, x := range res {
		switch x.target.name {
		case "gpufrac":
			out[i] = "gpufrac"
		case "vpa":
			out[i] = "VPA admission controller"
		case noGPU:
			out[i] = "gpufrac, pods without GPU (matchConditions false)"
		default:
			out[i] = "no webhook (baseline)"
		}
	}
	return out
}

// verdicts compares gpufrac with the goals: pod-create p50 and p99 no worse than VPA's
// at every rate, server-side p99 ≤ 5 ms (the goal is set at 200/s; reported at each).
func verdicts(r float64, res []*result) string {
	var g, v *result
	for _, x := range res {
		switch x.target.name {
		case "gpufrac":
			g = x
		case "vpa":
			v = x
		}
	}
	if g == nil || v == nil {
		return ""
	}
	var b strings.Builder
	gp99, vp99 := percentile(g.lat, 0.99), percentile(v.lat, 0.99)
	fmt.Fprintf(&b, "- pod-create p99 gpufrac %s vs VPA %s: %s\n", fmtDuration(gp99), fmtDuration(vp99), metOrMissed(gp99 <= vp99))
	gp50, vp50 := percentile(g.lat, 0.5), percentile(v.lat, 0.5)
	fmt.Fprintf(&b, "- pod-create p50 gpufrac %s vs VPA %s: %s\n", fmtDuration(gp50), fmtDuration(vp50), metOrMissed(gp50 <= vp50))
	if g.server.Count > 0 {
		p99 := g.server.Quantile(0.99)
		fmt.Fprintf(&b, "- gpufrac server-side p99 %s, goal ≤ %s (at 200/s): %s\n", fmtSeconds(p99), fmtDuration(serverGoal), metOrMissed(p99 <= serverGoal.Seconds()))
	}
	return b.String()
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func joinFloats(f []float64) string {
	s := make([]string, len(f))
	for i, x := range f {
		s[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(s, ", ")
}

func joinDurations(d []time.Duration) string {
	s := make([]string, len(d))
	for i, x := range d {
		s[i] = fmtDuration(x)
	}
	return strings.Join(s, ", ")
}
