package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/workload"
)

func init() { registerCommand(newStatusCmd) }

func newStatusCmd() *cobra.Command {
	var (
		kubeconfig, namespace string
		all                   bool
	)
	cmd := &cobra.Command{
		Use:   "status",
		Args:  noArgs("-n NAMESPACE lists one namespace, -A all; gpufrac explain NAME explains one autoscaler"),
		Short: "Per workload: applied vs recommended GPU fraction, update mode, next resize window, confidence",
		Long: `status lists the GPUFractionAutoscalers of a namespace (-A: all) with, per workload: its
update mode, how many pods carry the current recommendation (from the gpufrac.io/applied
annotation the admission webhook writes), the applied and recommended memory and
compute per pod, what the webhook writes besides the targets (the memory limit where
the recommendation has a memoryLimit above the target, and a time-sliced pod's compute
request, a share of one GPU reserved for placement; "-" when there is none), the next
resize window, confidence, and what the updater is blocked on. Installed as kubectl-gpufrac it runs as "kubectl gpufrac status".`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := clusterClient(kubeconfig, namespace)
			if err != nil {
				return err
			}
			opts := []client.ListOption{}
			if !all {
				opts = append(opts, client.InNamespace(ns))
			}
			var gfas gpufracv1.GPUFractionAutoscalerList
			if err := c.List(cmd.Context(), &gfas, opts...); err != nil {
				return fmt.Errorf("listing GPUFractionAutoscalers: %w", err)
			}
			var gfrs gpufracv1.GPUFractionRecommendationList
			if err := c.List(cmd.Context(), &gfrs, opts...); err != nil {
				return fmt.Errorf("listing GPUFractionRecommendations: %w", err)
			}
			var pods corev1.PodList
			if err := c.List(cmd.Context(), &pods, opts...); err != nil {
				return fmt.Errorf("listing pods: %w", err)
			}
			if len(gfas.Items) == 0 && !all {
				fmt.Fprintf(cmd.ErrOrStderr(), "no GPUFractionAutoscalers in namespace %s (use -A for all namespaces)\n", ns)
			}
			warnInvalidRecords(cmd.ErrOrStderr(), pods.Items)
			return writeStatus(cmd.OutOrStdout(), gfas.Items, gfrs.Items, pods.Items, time.Now())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "Kubeconfig file (default: $KUBECONFIG, ~/.kube/config or in-cluster).")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "", "Namespace (default: the kubeconfig context's).")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "All namespaces.")
	return cmd
}

// warnInvalidRecords writes one warning line to w per pod (holdsGPU) whose
// gpufrac.io/applied annotation does not parse, with the parse error: such a pod counts
// as not applied in the table, since the record says which autoscaler applied what.
func warnInvalidRecords(w io.Writer, pods []corev1.Pod) {
	for i := range pods {
		p := &pods[i]
		if !holdsGPU(p) {
			continue
		}
		if _, err := gpufracv1.ParseApplied(p.Annotations); err != nil {
			fmt.Fprintf(w, "warning: pod %s/%s: %v; counted as not applied (the updater never shrinks it)\n", p.Namespace, p.Name, err)
		}
	}
}

// holdsGPU is whether p is among the pods status counts, as the updater counts them
// (status.updater.pods): not being deleted and not ended. A Failed pod (evicted under
// node pressure, kept until garbage collection) or a Succeeded one (a Job's) holds no
// GPU, whatever its record says was written into it.
func holdsGPU(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && !workload.Ended(p)
}

// appliedPods is what the admission webhook recorded on the pods of one autoscaler:
// how many carry its record, and the memory (bytes) and compute (share of one GPU) of
// the last of them in the list, summed over its containers. Either is nil when no
// container had it written (a time-sliced pod's compute is not partitioned), so it
// prints as "-", not as 0.
type appliedPods struct {
	pods     int
	mem, cpu *resource.Quantity
}

// appliedByAutoscaler reads the applied record of each pod that holds a GPU (holdsGPU)
// once, by the namespace and autoscaler it names: a pod without a record, or whose
// record does not parse, counts for none.
func appliedByAutoscaler(pods []corev1.Pod) map[[2]string]appliedPods {
	out := map[[2]string]appliedPods{}
	for i := range pods {
		p := &pods[i]
		if !holdsGPU(p) {
			continue
		}
		rec, err := gpufracv1.ParseApplied(p.Annotations)
		if err != nil || rec == nil {
			continue
		}
		key := [2]string{p.Namespace, rec.Autoscaler}
		a := out[key]
		a.pods++
		a.mem, a.cpu = nil, nil
		for _, ct := range rec.Containers {
			a.mem = addQuantity(a.mem, ct.Memory)
			a.cpu = addQuantity(a.cpu, ct.Compute)
		}
		out[key] = a
	}
	return out
}

// addQuantity returns sum + v, where a nil sum is none yet and a nil v adds nothing.
func addQuantity(sum, v *resource.Quantity) *resource.Quantity {
	if v == nil {
		return sum
	}
	if sum == nil {
		c := v.DeepCopy()
		return &c
	}
	sum.Add(*v)
	return sum
}

// writeStatus writes one row per autoscaler of gfas: its pods among pods, its
// recommendation among gfrs (same namespace and name; none yet: its limit and request
// print as "-") and its status.updater, with the next resize window counted from now.
func writeStatus(w io.Writer, gfas []gpufracv1.GPUFractionAutoscaler, gfrs []gpufracv1.GPUFractionRecommendation, pods []corev1.Pod, now time.Time) error {
	recs := make(map[[2]string]*gpufracv1.GPUFractionRecommendation, len(gfrs))
	for i := range gfrs {
		recs[[2]string{gfrs[i].Namespace, gfrs[i].Name}] = &gfrs[i]
	}
	byAutoscaler := appliedByAutoscaler(pods)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tAUTOSCALER\tMODE\tPODS\tAPPLIED (MEM/COMPUTE)\tRECOMMENDED (MEM/COMPUTE)\tMEM LIMIT/COMPUTE REQUEST\tCONFIDENCE\tNEXT WINDOW\tUPDATER")
	for _, g := range gfas {
		mode := g.Spec.EffectiveUpdateMode()
		total := 0
		a := byAutoscaler[[2]string{g.Namespace, g.Name}]
		withRec, appliedStr := a.pods, "-"
		if a.pods > 0 {
			appliedStr = q(a.mem) + "/" + q(a.cpu)
		}
		if g.Status.Updater != nil {
			total = int(g.Status.Updater.Pods)
		}
		podsStr := fmt.Sprintf("%d applied", withRec)
		if total > 0 {
			podsStr = fmt.Sprintf("%d/%d applied", withRec, total)
		}
		conf := "-"
		if g.Status.ConfidencePercent != nil {
			conf = fmt.Sprintf("%d%%", *g.Status.ConfidencePercent)
		}
		next, updater := "any time", "-"
		if (g.Spec.UpdatePolicy != nil && len(g.Spec.UpdatePolicy.ResizeWindows) > 0) || mode == gpufracv1.UpdateModeOff || mode == gpufracv1.UpdateModeInitial {
			next = "-" // no replacements in these modes, or the updater reports the window
		}
		if u := g.Status.Updater; u != nil {
			switch {
			case u.ResizeWindowOpen:
				next = "open now"
			case u.NextWindowStart != nil:
				next = u.NextWindowStart.Sub(now).Round(time.Minute).String()
			}
			updater = fmt.Sprintf("%d out of date", u.PodsOutOfDate)
			if u.BlockedReason != "" {
				updater += ", blocked: " + u.BlockedReason
			}
		}
		recommended := q(g.Status.Memory) + "/" + q(g.Status.Compute)
		if o := g.Status.ObservedGeneration; o > 0 && o < g.Generation {
			// The spec changed since (bounds, policies, mode) and the recommender has
			// not acted on it yet (down, or an older version): the values are the old spec's.
			recommended += fmt.Sprintf(" (for spec generation %d, now %d: not yet recomputed)", o, g.Generation)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Namespace, g.Name, mode, podsStr, appliedStr,
			recommended, limitRequest(&g, recs[[2]string{g.Namespace, g.Name}]), conf, next, updater)
	}
	return tw.Flush()
}

// limitRequest is the status column of what the webhook writes from gfr besides the
// targets: the pod's memory limit (a binary quantity, bytes) where a container has a
// memoryLimit above its target, and its compute request (a milli quantity, share of one
// GPU), "-" for either when there is none (the limit is then the memory target) and
// for both without a recommendation.
func limitRequest(gfa *gpufracv1.GPUFractionAutoscaler, gfr *gpufracv1.GPUFractionRecommendation) string {
	if gfr == nil {
		return "-/-"
	}
	wr := writtenOf(gfa, gfr, 0) // no --gpu-memory here: minMemory uncapped
	limit, request := "-", "-"
	if wr.MemoryLimitBytes > 0 {
		limit = resource.NewQuantity(wr.MemoryLimitBytes, resource.BinarySI).String()
	}
	if wr.ComputeRequestMilli > 0 {
		request = backend.MilliQuantity(wr.ComputeRequestMilli).String()
	}
	return limit + "/" + request
}
