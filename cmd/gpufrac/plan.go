package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func init() { registerCommand(newPlanCmd) }

func newPlanCmd() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:   "plan",
		Args:  noArgs("plan lists every GPUSharingPolicy; kubectl describe gsp NAME shows one"),
		Short: "Per node pool: the device-plugin sharing plan (mode, replicas per GPU, MPS limits, GPUs freed)",
		Long: `plan lists the GPUSharingPolicies (cluster-scoped) with the plan the recommender wrote into
their status: the pool's nodes and physical GPUs, the sharing mode (TimeSlicing, MPS, or
Exclusive when no two replicas fit), the replicas N each GPU is advertised as and what
limits it (memory first, then compute), the per-client MPS limits, the opted-in pods and
the GPUs they hold now at one GPU each, need at N per GPU, and so free, and whether the
plan is applied (DryRun writes nothing). docs/sharing-planner.md gives the rules.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := clusterClient(kubeconfig, "")
			if err != nil {
				return err
			}
			var list gpufracv1.GPUSharingPolicyList
			if err := c.List(cmd.Context(), &list); err != nil {
				return fmt.Errorf("listing GPUSharingPolicies: %w", err)
			}
			if len(list.Items) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no GPUSharingPolicies (docs/sharing-planner.md)")
			}
			return writePlan(cmd.OutOrStdout(), list.Items)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster).")
	return cmd
}

// writePlan prints one line per policy, then each plan's reason and per-client MPS
// limits. What the recommender has not computed prints as "-", not 0: the node and GPU
// counts of a policy without a Planned condition (no status yet), and the plan's
// columns (replicas, pods, GPUs held, needed, freed) of a policy never planned.
func writePlan(w io.Writer, pols []gpufracv1.GPUSharingPolicy) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POLICY\tMODE\tNODES\tGPUS\tSHARING\tREPLICAS\tMPS MEMORY/THREADS\tPODS\tGPUS HELD\tNEEDED\tFREED\tSTATE")
	for _, p := range pols {
		s := p.Status
		mps := "-"
		if s.MPS != nil {
			mps = fmt.Sprintf("%s/%d%%", s.MPS.PinnedDeviceMemoryLimit.String(), s.MPS.ActiveThreadPercentage)
		}
		mode := p.Spec.Mode
		if mode == "" {
			mode = gpufracv1.PlanModeDryRun
		}
		n := func(v int32) string { return fmt.Sprint(v) }
		reported := meta.FindStatusCondition(s.Conditions, gpufracv1.ConditionPlanned) != nil
		planned := s.Replicas > 0 // a plan has N ≥ 1 replicas per GPU; 0: never planned
		nodes, gpus := orDashIf(reported, n(s.Nodes)), orDashIf(reported, n(s.GPUs))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, mode, nodes, gpus, orDash(string(s.SharingMode)),
			orDashIf(planned, n(s.Replicas)), mps, orDashIf(planned, n(s.Pods)), orDashIf(planned, n(s.GPUsHeld)),
			orDashIf(planned, n(s.GPUsNeeded)), orDashIf(planned, n(s.GPUsFreed)), state(&p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range pols {
		if p.Status.Reason != "" {
			fmt.Fprintf(w, "%s: %s\n", p.Name, p.Status.Reason)
		}
	}
	return nil
}

// orDashIf is v when ok, else "-".
func orDashIf(ok bool, v string) string {
	if !ok {
		return "-"
	}
	return v
}

// state is the Planned condition's reason when there is no plan, else the Applied one's;
// without a Planned condition, that the recommender has not reported on the policy. A
// status computed for an older spec generation (the spec changed since, and the
// recommender has not planned it: down, or an older version) is said first: its columns
// are the plan of the spec before.
func state(p *gpufracv1.GPUSharingPolicy) string {
	if meta.FindStatusCondition(p.Status.Conditions, gpufracv1.ConditionPlanned) == nil {
		return "no status yet: the recommender has not planned this policy"
	}
	if g := p.Status.ObservedGeneration; g > 0 && g < p.Generation {
		return fmt.Sprintf("spec changed, not planned yet: the plan shown is for generation %d, the spec is at %d; %s", g, p.Generation, planState(p))
	}
	return planState(p)
}

// planState is state from the conditions alone.
func planState(p *gpufracv1.GPUSharingPolicy) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, gpufracv1.ConditionPlanned); c != nil && c.Status != "True" {
		return c.Reason + ": " + c.Message
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, gpufracv1.ConditionApplied); c != nil {
		return c.Reason
	}
	return "-"
}
