package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/contract"
	"github.com/gpufrac/gpufrac/recommender/policy"
	"github.com/gpufrac/gpufrac/recommender/recommend"
)

func init() { registerCommand(newExplainCmd) }

func newExplainCmd() *cobra.Command {
	var kubeconfig, namespace, gpuMemory string
	cmd := &cobra.Command{
		Use:   "explain NAME",
		Short: "Why an autoscaler's recommendation has its value: peaks, headroom, caps, bounds, guardrail, sharing mode",
		Long: `explain reads a GPUFractionAutoscaler and its GPUFractionRecommendation and says, per
container, where each number comes from: the observed peak and headroom behind the
memory target, the policy caps between the uncapped and the final target, the bounds
and the confidence they reflect, the memory limit and compute request the admission
webhook writes where the recommendation has them, the latency guardrail's state, and
the sharing-mode reason. Installed as kubectl-gpufrac it runs as "kubectl gpufrac explain NAME".`,
		Args: func(_ *cobra.Command, args []string) error {
			switch len(args) {
			case 0:
				return errors.New("explain needs the autoscaler's name: gpufrac explain NAME [-n NAMESPACE] (gpufrac status -A lists them)")
			case 1:
				return nil
			}
			return fmt.Errorf("explain takes one autoscaler's name, got %d arguments (%s): gpufrac explain NAME [-n NAMESPACE]", len(args), strings.Join(args, " "))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			gpu, err := parseGPUMemory(gpuMemory) // before reading the cluster: bad input fails first
			if err != nil {
				return err
			}
			c, ns, err := clusterClient(kubeconfig, namespace)
			if err != nil {
				return err
			}
			key := types.NamespacedName{Namespace: ns, Name: args[0]}
			var gfa gpufracv1.GPUFractionAutoscaler
			if err := c.Get(cmd.Context(), key, &gfa); err != nil {
				return fmt.Errorf("GPUFractionAutoscaler %s: %w", key, err)
			}
			var gfr gpufracv1.GPUFractionRecommendation
			if err := c.Get(cmd.Context(), key, &gfr); apierrors.IsNotFound(err) {
				return explainNoRecommendation(cmd.OutOrStdout(), &gfa)
			} else if err != nil {
				return fmt.Errorf("GPUFractionRecommendation %s (written by the recommender): %w", key, err)
			}
			return explain(cmd.OutOrStdout(), &gfa, &gfr, gpu)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster).")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "Namespace (default: the kubeconfig context's).")
	cmd.Flags().StringVar(&gpuMemory, "gpu-memory", "80Gi", "Memory of one GPU, a quantity, for the packing line (the recommender's --gpu-memory).")
	return cmd
}

func q(v *resource.Quantity) string {
	if v == nil {
		return "-"
	}
	return v.String()
}

// explainNoRecommendation writes what is known of an autoscaler the recommender has
// written no GPUFractionRecommendation for: its target and mode, and that its pods and
// recommendation are unknown (no data is not zero: not "0 pods matched").
func explainNoRecommendation(w io.Writer, gfa *gpufracv1.GPUFractionAutoscaler) error {
	_, err := fmt.Fprintf(w, "%s/%s targets %s %s; updateMode %s.\n"+
		"No recommendation yet: the recommender has written no GPUFractionRecommendation %s/%s (is it running and watching namespace %s?); the pods it matches are not known.\n",
		gfa.Namespace, gfa.Name, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name, gfa.Spec.EffectiveUpdateMode(), gfa.Namespace, gfa.Name, gfa.Namespace)
	return err
}

// explain writes the explanation of one autoscaler; gpuBytes is the memory of one GPU,
// bytes, for the packing line.
func explain(w io.Writer, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation, gpuBytes float64) error {
	mode := gfa.Spec.EffectiveUpdateMode()
	pods := "pods"
	if gfr.Status.MatchedPods == 1 {
		pods = "pod"
	}
	fmt.Fprintf(w, "%s/%s targets %s %s; updateMode %s; %d %s matched; history attributed by %s.\n",
		gfa.Namespace, gfa.Name, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name, mode, gfr.Status.MatchedPods, pods, orDash(string(gfr.Status.Attribution)))
	if len(gfr.Status.ContainerRecommendations) == 0 {
		fmt.Fprintln(w, "No recommendation yet.")
	}
	// What the webhook writes and the updater compares: the targets with the policy's
	// bounds applied (a recommendation that predates a raised minMemory or a lowered
	// maxMemory).
	written := contract.WithPolicy(gfa, contract.TargetsOf(gfa, gfr), int64(gpuBytes))
	for _, c := range gfr.Status.ContainerRecommendations {
		cp := gfa.Spec.ContainerPolicy(c.ContainerName)
		packAt := c.Target.Memory
		wt, ok := written[c.ContainerName]
		youngShare := ok && wt.YoungShare
		if ok && !youngShare && c.Target.Memory != nil && wt.Memory != c.Target.Memory.Value() {
			packAt = resource.NewQuantity(wt.Memory, resource.BinarySI)
		}
		headroom := policy.MemoryHeadroom(cp) * 100
		d, recorded := c.Derivation, true
		if d == nil {
			// Written before the recommender recorded its settings: its defaults.
			d, recorded = recommend.Config{}.WithDefaults().Derivation(), false
		}
		fmt.Fprintf(w, "\n%s %s (confidence %d%%, %dh of history):\n", containerWord(c.ContainerType), c.ContainerName, c.ConfidencePercent, c.HistoryHours)
		if c.ContainerType == gpufracv1.ContainerTypeInit {
			fmt.Fprintln(w, "  runs before the others: counts in the pod's total as max(this, the running containers' sum), not in its confidence; the webhook leaves it as the pod asks")
		}
		if c.Target.Memory == nil {
			// No memory samples (or memory not controlled): nothing to derive, and the
			// webhook leaves the pod a whole GPU.
			fmt.Fprintf(w, "  memory  no target: no memory samples yet, or the policy does not control memory (recent peak %s)", q(c.ObservedPeakMemory))
		} else {
			fmt.Fprintf(w, "  memory  target %s = max(p%s of per-pod peaks per %s, recent peak %s) + %s%% headroom",
				q(c.Target.Memory), percent(d.MemoryPercentile.AsApproximateFloat64()), shortDuration(d.MemoryInterval.Duration), q(c.ObservedPeakMemory), percent(headroom/100))
		}
		if c.UncappedTarget.Memory != nil && c.Target.Memory != nil && c.UncappedTarget.Memory.Cmp(*c.Target.Memory) != 0 {
			fmt.Fprintf(w, "; from %s by the policy, the GPU size or rounding down to a share of the GPU", q(c.UncappedTarget.Memory))
		}
		switch {
		case packAt != c.Target.Memory && packAt.Cmp(*c.Target.Memory) > 0:
			fmt.Fprintf(w, "\n          minMemory %s of the container policy raises it: the webhook writes %s and the updater compares pods with it (the recommendation predates the policy; at most one GPU)",
				q(cp.MinMemory), packAt)
		case packAt != c.Target.Memory:
			fmt.Fprintf(w, "\n          maxMemory %s of the container policy lowers it: the webhook writes %s and the updater compares pods with it (the recommendation predates the policy)",
				q(cp.MaxMemory), packAt)
		}
		if c.YoungMarginPercent > 0 {
			fmt.Fprintf(w, "\n          young workload: + %d%% margin (100/n, n hours its memory stayed at its highest level); confidence from that evidence, not the history's length",
				c.YoungMarginPercent)
		}
		fmt.Fprintf(w, "\n          bounds [%s, %s]: a pod whose target is outside them is worth replacing\n", q(c.LowerBound.Memory), q(c.UpperBound.Memory))
		if youngShare {
			fmt.Fprintf(w, "          young share %s: the whole share of one GPU the target falls in, written as the pod's limit and in its record; the pod is placed by its observed peak, and the updater compares pods with the share, so it replaces them when the target moves to another share, not for each hour's narrower target\n",
				q(resource.NewQuantity(wt.Memory, resource.BinarySI)))
		} else if c.MemoryLimit != nil {
			fmt.Fprintf(w, "          limit %s: burst room above the target from the workload's own spread of hourly peaks (--memory-spread-factor), written as the pod's limit; the pod is placed by its observed peak and may use memory up to the limit; the updater compares the target, not the limit\n", q(c.MemoryLimit))
		}
		if line := packingLine(packAt, c.ObservedPeakMemory, gpuBytes); line != "" {
			fmt.Fprintf(w, "  packing %s\n", line)
		}
		if c.Target.Compute == nil {
			// No compute samples (or compute not controlled): nothing to derive.
			fmt.Fprintln(w, "  compute no target: no compute samples yet, or the policy does not control compute")
		} else {
			fmt.Fprintf(w, "  compute target %s = p%s of activity from %s + %s%% margin", q(c.Target.Compute),
				percent(d.ComputePercentile.AsApproximateFloat64()), orDash(c.ComputeSource), percent(d.ComputeMargin.AsApproximateFloat64()))
			if c.UncappedTarget.Compute != nil && c.UncappedTarget.Compute.Cmp(*c.Target.Compute) != 0 {
				fmt.Fprintf(w, "; from %s by the policy, floor or guardrail", q(c.UncappedTarget.Compute))
			}
			fmt.Fprintf(w, "\n          bounds [%s, %s]\n", q(c.LowerBound.Compute), q(c.UpperBound.Compute))
		}
		if !recorded && (c.Target.Memory != nil || c.Target.Compute != nil) {
			fmt.Fprintln(w, "          percentiles, interval and margin not recorded (a status written by an older recommender): the recommender's defaults, which its flags (--compute-margin, --memory-aggregation-interval) may have changed")
		}
		if c.ComputeRequest != nil {
			fmt.Fprintf(w, "          request %s: the share of one GPU the time-sliced pod reserves for placement, its effective compute at the recommender's --contention-budget, written as the pod's compute request with no limit (the target is not written); the updater replaces a pod for it only when it grew by the updater's --compute-request-growth (25 %%) over the request the pod was placed with\n", q(c.ComputeRequest))
		}
		fmt.Fprintf(w, "  sharing %s: %s\n", c.SharingMode, c.SharingModeReason)
		if line := migLines(c); line != "" {
			fmt.Fprint(w, line)
		}
	}
	fmt.Fprintln(w, "\nconditions:")
	if len(gfr.Status.Conditions) == 0 {
		fmt.Fprintln(w, "  none yet")
	}
	for _, c := range gfr.Status.Conditions {
		fmt.Fprintf(w, "  %-24s %-7s %-20s %s\n", c.Type, c.Status, c.Reason, strings.TrimSpace(c.Message))
	}
	return nil
}

// packingLine says how many pods of a memory target (bytes) fit one GPU of gpuBytes and
// what one more would need: "2 fit one 80Gi GPU at this target; 3 fit if ≤ 27306Mi (the
// recent peak 20Gi leaves 6.7Gi)". Empty without a target.
func packingLine(target, peak *resource.Quantity, gpuBytes float64) string {
	if target == nil || target.Sign() <= 0 || gpuBytes <= 0 {
		return ""
	}
	const mib = 1 << 20
	t := target.AsApproximateFloat64()
	n := math.Floor(gpuBytes / t)
	next := math.Floor(gpuBytes/(n+1)/mib) * mib
	gpu := resource.NewQuantity(int64(gpuBytes), resource.BinarySI)
	s := fmt.Sprintf("%.0f fit one %s GPU at this target; %.0f fit if ≤ %s", n, gpu, n+1, policy.MemoryQuantity(next))
	if peak != nil {
		room := next - peak.AsApproximateFloat64()
		if room > 0 {
			s += fmt.Sprintf(" (the recent peak %s leaves %s; the recommender rounds down to it when that is at least --fit-memory-headroom)", peak, policy.MemoryQuantity(room))
		} else {
			s += fmt.Sprintf(" (below the recent peak %s: not safe)", peak)
		}
	}
	return s
}

// migLines says how the recommendation reads against the MIG instance its samples were
// measured on, and which MIG profile would hold it instead of time-slicing; "" without
// MIG advice.
func migLines(c gpufracv1.ContainerRecommendation) string {
	m := c.MIG
	if m == nil {
		return ""
	}
	var b strings.Builder
	if m.MeasuredProfile != "" {
		fmt.Fprintf(&b, "  MIG     measured on a %s instance: compute is read against the instance and converted to a share of the GPU", m.MeasuredProfile)
		if m.ComputeOfProfile != nil {
			fmt.Fprintf(&b, "; compute target %s of the instance (%s of the GPU)", m.ComputeOfProfile, q(c.Target.Compute))
		}
		if m.MemoryPercentOfProfile != nil {
			fmt.Fprintf(&b, "; memory target %d%% of the instance's memory", *m.MemoryPercentOfProfile)
		}
		b.WriteString("\n")
	}
	label := "  MIG    "
	if m.MeasuredProfile != "" {
		label = "         "
	}
	fmt.Fprintf(&b, "%s %s\n", label, m.Reason)
	return b.String()
}

// percent writes a ratio as a percent without trailing zeros: 0.9 → "90", 0.125 → "12.5".
func percent(r float64) string {
	return strconv.FormatFloat(math.Round(r*1e4)/100, 'f', -1, 64)
}

// shortDuration writes d without zero units: 1h, 30m, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// containerWord names where a container sits: "container", "sidecar container" (a
// native sidecar) or "init container".
func containerWord(t gpufracv1.ContainerType) string {
	switch t {
	case gpufracv1.ContainerTypeSidecar:
		return "sidecar container"
	case gpufracv1.ContainerTypeInit:
		return "init container"
	}
	return "container"
}
