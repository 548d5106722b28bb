package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// apply sets the Applied condition. In DryRun mode (or without a plan: nodes nil) it
// writes nothing (dryRun); in Apply mode it writes the config entry, then the node
// labels, so a node never names an entry that does not exist yet. A write that fails
// sets Applied=False (ApplyFailed) and returns the error, so the reconcile is retried.
func (r *Reconciler) apply(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) error {
	if pol.Spec.Mode != gpufracv1.PlanModeApply {
		return r.dryRun(ctx, pol)
	}
	if nodes == nil {
		return nil // no plan: keep what was applied before
	}
	claimed, err := r.claimed(ctx, pol, nodes)
	if err != nil {
		r.setCondition(pol, gpufracv1.ConditionApplied, metav1.ConditionFalse, gpufracv1.ReasonApplyFailed, err.Error())
		return err
	}
	if claimed != "" {
		// Relabeling would take the node from the other policy, which would take it
		// back at its next reconcile: the device plugin switching configs each time.
		prev := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionApplied)
		if prev == nil || prev.Reason != gpufracv1.ReasonNodesClaimed || prev.Message != claimed {
			r.event(pol, corev1.EventTypeWarning, gpufracv1.ReasonNodesClaimed, "%s", claimed)
		}
		r.setCondition(pol, gpufracv1.ConditionApplied, metav1.ConditionFalse, gpufracv1.ReasonNodesClaimed, claimed)
		return nil
	}
	toLabel, unknown := sizedNodes(pol, nodes)
	changed, err := r.writeConfig(ctx, pol)
	gone := 0
	if err == nil {
		var labeled int
		labeled, gone, err = r.labelNodes(ctx, pol, toLabel)
		changed += labeled
	}
	if err != nil {
		r.setCondition(pol, gpufracv1.ConditionApplied, metav1.ConditionFalse, gpufracv1.ReasonApplyFailed, err.Error())
		r.event(pol, corev1.EventTypeWarning, gpufracv1.ReasonApplyFailed, "%v", err)
		return err
	}
	pol.Status.LabeledNodes = int32(len(toLabel) - gone)
	msg := fmt.Sprintf("config %s in ConfigMap %s/%s, %d node(s) labeled", pol.Status.ConfigName, pol.Spec.ConfigMap.Namespace, pol.Spec.ConfigMap.Name, len(toLabel)-gone)
	if len(unknown) > 0 {
		msg += fmt.Sprintf("; %d node(s) left unlabeled (%s): no valid %s label, so their GPU's size is not known (label them with GPU feature discovery, or set spec.gpuMemory to the pool's smallest GPU)",
			len(unknown), nodeNames(unknown), GPUMemoryLabel)
	}
	r.setCondition(pol, gpufracv1.ConditionApplied, metav1.ConditionTrue, gpufracv1.ReasonApplied, msg)
	if changed > 0 {
		r.event(pol, corev1.EventTypeNormal, gpufracv1.ReasonApplied, "%s (%d write(s))", msg, changed)
	}
	return nil
}

// claimed says which of nodes (at most three named, then a count) another policy holds:
// their nvidia.com/device-plugin.config label is the config name of another
// GPUSharingPolicy in Apply mode whose nodeSelector selects them too ("" when none). A
// node labeled for a policy that is gone, in DryRun mode or no longer selects it is
// free. The error is a failure to list the policies.
func (r *Reconciler) claimed(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) (string, error) {
	own := ConfigName(pol)
	var others map[string]*gpufracv1.GPUSharingPolicy // config name → policy, read at the first node labeled for another
	var parts []string
	n := 0
	for i := range nodes {
		node := &nodes[i]
		v := node.Labels[gpufracv1.DevicePluginConfigLabel]
		if v == "" || v == own {
			continue
		}
		if others == nil {
			var list gpufracv1.GPUSharingPolicyList
			if err := r.reader().List(ctx, &list); err != nil {
				return "", fmt.Errorf("listing GPUSharingPolicies: %w", err)
			}
			others = map[string]*gpufracv1.GPUSharingPolicy{}
			for j := range list.Items {
				if o := &list.Items[j]; o.Name != pol.Name && o.DeletionTimestamp == nil && o.Spec.Mode == gpufracv1.PlanModeApply {
					others[ConfigName(o)] = o
				}
			}
		}
		o := others[v]
		if o == nil {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&o.Spec.NodeSelector)
		if err != nil || !sel.Matches(labels.Set(node.Labels)) {
			continue
		}
		if n++; n <= 3 {
			parts = append(parts, fmt.Sprintf("node %s (GPUSharingPolicy %s)", node.Name, o.Name))
		}
	}
	if n == 0 {
		return "", nil
	}
	if n > 3 {
		parts = append(parts, fmt.Sprintf("and %d more", n-3))
	}
	return fmt.Sprintf("%d selected node(s) are labeled %s for another policy in Apply mode that selects them too: %s; nothing written (make the nodeSelectors disjoint, or set one policy to DryRun)",
		n, gpufracv1.DevicePluginConfigLabel, strings.Join(parts, ", ")), nil
}

// writeConfig creates the ConfigMap with the plan's entry, or sets the entry in the
// existing one keeping its other keys. It returns 1 when it wrote, 0 when the entry was
// already current.
func (r *Reconciler) writeConfig(ctx context.Context, pol *gpufracv1.GPUSharingPolicy) (int, error) {
	ref, key, want := pol.Spec.ConfigMap, pol.Status.ConfigName, pol.Status.Config
	var cm corev1.ConfigMap
	err := r.reader().Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &cm)
	if apierrors.IsNotFound(err) {
		cm = corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "gpufrac"}},
			Data:       map[string]string{key: want},
		}
		if err := r.Client.Create(ctx, &cm); err != nil {
			return 0, fmt.Errorf("creating ConfigMap %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		return 1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading ConfigMap %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	if cm.Data[key] == want {
		return 0, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[key] = want
	if err := r.Client.Patch(ctx, &cm, patch); err != nil {
		return 0, fmt.Errorf("writing key %s of ConfigMap %s/%s: %w", key, ref.Namespace, ref.Name, err)
	}
	return 1, nil
}

// sizedNodes splits nodes into those the plan may label and those it may not: without
// spec.gpuMemory, a node without a valid nvidia.com/gpu.memory label (a node that joined
// before GPU feature discovery labeled it, or one it does not run on) has a GPU of
// unknown size, which the plan did not count (gpuMemory), so it is not labeled: its GPUs
// would be shared N ways by pods sized for the others'. A node that already carries the
// plan's label keeps it (removing it would restart its device plugin under its pods).
func sizedNodes(pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) (toLabel, unknown []corev1.Node) {
	for _, n := range nodes {
		if _, ok := nodeGPUMemoryMiB(&n); ok || pol.Spec.GPUMemory != nil || n.Labels[gpufracv1.DevicePluginConfigLabel] == ConfigName(pol) {
			toLabel = append(toLabel, n)
		} else {
			unknown = append(unknown, n)
		}
	}
	return toLabel, unknown
}

// nodeNames names at most three nodes, then a count of the rest.
func nodeNames(nodes []corev1.Node) string {
	var names []string
	for i, n := range nodes {
		if i == 3 {
			names = append(names, fmt.Sprintf("%d more", len(nodes)-3))
			break
		}
		names = append(names, n.Name)
	}
	return strings.Join(names, ", ")
}

// labelNodes sets nvidia.com/device-plugin.config to the plan's config name on every
// node that lacks it (a merge patch of that one label) and returns how many it wrote
// and how many were gone: a node deleted since the plan listed it (the cluster
// autoscaler removed it, a spot node reclaimed) runs nothing any more, so its NotFound
// is no failure. The error is the first other failed patch.
func (r *Reconciler) labelNodes(ctx context.Context, pol *gpufracv1.GPUSharingPolicy, nodes []corev1.Node) (n, gone int, err error) {
	for i := range nodes {
		node := &nodes[i]
		if node.Labels[gpufracv1.DevicePluginConfigLabel] == pol.Status.ConfigName {
			continue
		}
		patch := client.MergeFrom(node.DeepCopy())
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[gpufracv1.DevicePluginConfigLabel] = pol.Status.ConfigName
		if err := r.Client.Patch(ctx, node, patch); apierrors.IsNotFound(err) {
			gone++
			continue
		} else if err != nil {
			return n, gone, fmt.Errorf("labeling node %s: %w", node.Name, err)
		}
		n++
	}
	return n, gone, nil
}

// dryRun sets Applied False (DryRun). Nodes that still carry the policy's
// nvidia.com/device-plugin.config label (written in Apply mode, before the policy was
// set to DryRun) are named, with a Warning event when they first are: their device
// plugin still shares each GPU by the entry last written, which no longer follows the
// plan in status; the planner does not remove the label (under MPS that stops the
// daemon under the running clients). The error is a failed node list.
func (r *Reconciler) dryRun(ctx context.Context, pol *gpufracv1.GPUSharingPolicy) error {
	msg := "dry run: the plan is in status; set spec.mode Apply to write it"
	var list corev1.NodeList
	err := r.reader().List(ctx, &list, client.MatchingLabels{gpufracv1.DevicePluginConfigLabel: ConfigName(pol)})
	if err != nil {
		err = fmt.Errorf("listing nodes labeled %s=%s: %w", gpufracv1.DevicePluginConfigLabel, ConfigName(pol), err)
	} else if len(list.Items) > 0 {
		msg = fmt.Sprintf("dry run: the plan is in status, not written; %d node(s) (%s) still carry %s=%s from Apply mode, so their device plugin shares each GPU by the entry last written to ConfigMap %s/%s, which no longer follows the plan: set spec.mode Apply, or remove the label once their pods are gone to stop sharing",
			len(list.Items), nodeNames(list.Items), gpufracv1.DevicePluginConfigLabel, ConfigName(pol), pol.Spec.ConfigMap.Namespace, pol.Spec.ConfigMap.Name)
		if prev := meta.FindStatusCondition(pol.Status.Conditions, gpufracv1.ConditionApplied); prev == nil || prev.Message != msg {
			r.event(pol, corev1.EventTypeWarning, gpufracv1.ReasonDryRun, "%s", msg)
		}
	}
	r.setCondition(pol, gpufracv1.ConditionApplied, metav1.ConditionFalse, gpufracv1.ReasonDryRun, msg)
	return err
}
