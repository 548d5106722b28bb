package main

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

func TestWritePlan(t *testing.T) {
	mps := gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a100"}, Spec: gpufracv1.GPUSharingPolicySpec{Mode: gpufracv1.PlanModeApply}}
	mps.Status = gpufracv1.GPUSharingPolicyStatus{Nodes: 2, GPUs: 8, SharingMode: gpufracv1.SharingModeMPS, Replicas: 3, Pods: 7, GPUsHeld: 7, GPUsNeeded: 3, GPUsFreed: 4,
		Reason: "compute: 3 × 300m (x/y) fit the 1000m budget",
		MPS:    &gpufracv1.MPSPlan{PinnedDeviceMemoryLimit: resource.MustParse("27306Mi"), ActiveThreadPercentage: 33},
		Conditions: []metav1.Condition{{Type: gpufracv1.ConditionPlanned, Status: "True", Reason: gpufracv1.ReasonPlanned},
			{Type: gpufracv1.ConditionApplied, Status: "True", Reason: gpufracv1.ReasonApplied}}}
	none := gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}
	none.Status.Conditions = []metav1.Condition{{Type: gpufracv1.ConditionPlanned, Status: "False", Reason: gpufracv1.ReasonNoNodes, Message: "the nodeSelector matches no node"}}
	// No recommendations yet on 3 nodes with 12 GPUs: the nodes are counted, there is no plan.
	waiting := gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "waiting"}}
	waiting.Status = gpufracv1.GPUSharingPolicyStatus{Nodes: 3, GPUs: 12, Conditions: []metav1.Condition{{Type: gpufracv1.ConditionPlanned, Status: "False",
		Reason: gpufracv1.ReasonNoRecommendations, Message: "none yet"}}}
	// Planned before, then its nodes went: the last plan is kept, next to the reason.
	stale := *mps.DeepCopy()
	stale.Name, stale.Status.Nodes, stale.Status.GPUs = "stale", 0, 0
	stale.Status.Conditions = []metav1.Condition{{Type: gpufracv1.ConditionPlanned, Status: "False", Reason: gpufracv1.ReasonNoNodes, Message: "the nodeSelector matches no node"}}
	fresh := gpufracv1.GPUSharingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}} // no status at all
	// The spec changed (generation 3) since the plan (generation 2): the recommender is
	// down or older; the columns are the plan of the spec before, and the state says so.
	edited := *mps.DeepCopy()
	edited.Name, edited.Generation, edited.Status.ObservedGeneration = "edited", 3, 2
	var b bytes.Buffer
	if err := writePlan(&b, []gpufracv1.GPUSharingPolicy{mps, none, waiting, stale, fresh, edited}); err != nil {
		t.Fatal(err)
	}
	wantContains(t, "output", b.String(),
		"a100     Apply   2      8     MPS      3         27306Mi/33%         7     7          3       4      Applied",
		"empty    DryRun  0      0     -        -         -                   -     -          -       -      NoNodes: the nodeSelector matches no node",
		"waiting  DryRun  3      12    -        -         -                   -     -          -       -      NoRecommendations: none yet",
		"stale    Apply   0      0     MPS      3         27306Mi/33%         7     7          3       4      NoNodes: the nodeSelector matches no node",
		"fresh    DryRun  -      -     -        -         -                   -     -          -       -      no status yet: the recommender has not planned this policy",
		"a100: compute: 3 × 300m (x/y) fit the 1000m budget",
		"edited   Apply   2      8     MPS      3         27306Mi/33%         7     7          3       4      spec changed, not planned yet: the plan shown is for generation 2, the spec is at 3; Applied",
	)
}
