package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/recommender/policy"
)

func init() { registerCommand(newExplainCmd) }

func newExplainCmd() *cobra.Command {
	var kubeconfig, namespace string
	cmd := &cobra.Command{
		Use:   "explain NAME",
		Short: "Why an autoscaler's recommendation has its value: peaks, headroom, caps, bounds, guardrail, sharing mode",
		Long: `explain reads a GPUFractionAutoscaler and its GPUFractionRecommendation and says, per
container, where each number comes from: the observed peak and headroom behind the
memory target, the policy caps between the uncapped and the final target, the bounds
and the confidence they reflect, the latency guardrail's state, and the sharing-mode
reason. Installed as kubectl-gpufrac it runs as "kubectl gpufrac explain NAME".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := newClientNamespace(kubeconfig, namespace)
			if err != nil {
				return err
			}
			key := types.NamespacedName{Namespace: ns, Name: args[0]}
			var gfa gpufracv1.GPUFractionAutoscaler
			if err := c.Get(cmd.Context(), key, &gfa); err != nil {
				return fmt.Errorf("GPUFractionAutoscaler %s: %w", key, err)
			}
			var gfr gpufracv1.GPUFractionRecommendation
			if err := c.Get(cmd.Context(), key, &gfr); err != nil {
				return fmt.Errorf("GPUFractionRecommendation %s (written by the recommender): %w", key, err)
			}
			return explain(cmd.OutOrStdout(), &gfa, &gfr)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster).")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "Namespace (default: the kubeconfig context's).")
	return cmd
}

func q(v *resource.Quantity) string {
	if v == nil {
		return "-"
	}
	return v.String()
}

func explain(w io.Writer, gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) error {
	mode := gfa.Spec.EffectiveUpdateMode()
	fmt.Fprintf(w, "%s/%s targets %s %s; updateMode %s; %d pods matched; history attributed by %s.\n",
		gfa.Namespace, gfa.Name, gfa.Spec.TargetRef.Kind, gfa.Spec.TargetRef.Name, mode, gfr.Status.MatchedPods, orDash(string(gfr.Status.Attribution)))
	if len(gfr.Status.ContainerRecommendations) == 0 {
		fmt.Fprintln(w, "No recommendation yet.")
	}
	for _, c := range gfr.Status.ContainerRecommendations {
		cp := gfa.Spec.ContainerPolicy(c.ContainerName)
		headroom := policy.MemoryHeadroom(cp) * 100
		fmt.Fprintf(w, "\ncontainer %s (confidence %d%%, %dh of history):\n", c.ContainerName, c.ConfidencePercent, c.HistoryHours)
		fmt.Fprintf(w, "  memory  target %s = max(p90 of hourly per-pod peaks, recent 24h peak %s) + %.0f%% headroom", q(c.Target.Memory), q(c.ObservedPeakMemory), headroom)
		if c.UncappedTarget.Memory != nil && c.Target.Memory != nil && c.UncappedTarget.Memory.Cmp(*c.Target.Memory) != 0 {
			fmt.Fprintf(w, "; capped from %s by the policy or the GPU size", q(c.UncappedTarget.Memory))
		}
		fmt.Fprintf(w, "\n          bounds [%s, %s]: a pod outside them is worth replacing\n", q(c.LowerBound.Memory), q(c.UpperBound.Memory))
		fmt.Fprintf(w, "  compute target %s = p90 of activity from %s + 15%% margin", q(c.Target.Compute), orDash(c.ComputeSource))
		if c.UncappedTarget.Compute != nil && c.Target.Compute != nil && c.UncappedTarget.Compute.Cmp(*c.Target.Compute) != 0 {
			fmt.Fprintf(w, "; from %s by the policy, floor or guardrail", q(c.UncappedTarget.Compute))
		}
		fmt.Fprintf(w, "\n          bounds [%s, %s]\n", q(c.LowerBound.Compute), q(c.UpperBound.Compute))
		fmt.Fprintf(w, "  sharing %s: %s\n", c.SharingMode, c.SharingModeReason)
	}
	fmt.Fprintln(w, "\nconditions:")
	for _, c := range gfr.Status.Conditions {
		fmt.Fprintf(w, "  %-24s %-7s %-20s %s\n", c.Type, c.Status, c.Reason, strings.TrimSpace(c.Message))
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
