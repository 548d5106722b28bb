package updater

import (
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Budget limits the evictions of one workload: never below MinReplicas running pods,
// never more than MaxInFlight pods being replaced at once. Create it with NewBudget,
// ask Allow before each eviction and call Took after each one.
type Budget struct {
	// MinReplicas is spec.updatePolicy.minReplicas (default 2).
	MinReplicas int32
	// Running is the number of the workload's pods that are running, ready and not
	// terminating.
	Running int
	// InFlight is the number of pods being replaced (unavailable), summed over the
	// pods' controllers: see NewBudget.
	InFlight int
	// MaxInFlight is max(1, ⌊(Running + InFlight) × fraction⌋).
	MaxInFlight int
}

// IsReady reports whether a pod is Running with condition Ready True (also used by the e2e tests).
func IsReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NewBudget counts a workload's disruption budget from its pods (those not Succeeded or
// Failed; terminating ones included), grouped by their controller, as a
// PodDisruptionBudget does: a group whose controller's wanted replicas are known (wanted:
// controller UID → ReplicaSet or StatefulSet spec.replicas, DaemonSet
// status.desiredNumberScheduled, a Job's active pods: desiredReplicas, read from the
// informer cache) has wanted − its pods that are ready and not terminating in flight, so
// a replacement its controller never created counts without any memory of the eviction
// (an updater restart forgets none). Other groups (no controller, a controller of
// another kind or one that could not be read) have their pods not ready or terminating
// in flight. Either way a group counts at least the replacements this updater still
// awaits for it (awaited: controller UID, "" for none → unsatisfied expectations, which
// status.updater.awaitedReplacements keeps across restarts). The in-flight fraction is as
// BudgetOf's. Pods in evicted (already evicted, though the cache may not show it
// yet) count as terminating.
func NewBudget(pods []*corev1.Pod, wanted map[types.UID]int32, awaited map[types.UID]int, evicted map[types.UID]bool, minReplicas int32, fraction float64) Budget {
	var running, inFlight int
	ready, notReady := map[types.UID]int{}, map[types.UID]int{}
	groups := map[types.UID]bool{}
	for _, p := range pods {
		g := controllerUID(p)
		groups[g] = true
		if p.DeletionTimestamp == nil && IsReady(p) && !evicted[p.UID] {
			ready[g]++
		} else {
			notReady[g]++
		}
	}
	for g := range awaited {
		groups[g] = true
	}
	for g := range groups {
		running += ready[g]
		unavailable := notReady[g]
		if want, ok := wanted[g]; ok && g != "" {
			unavailable = max(0, int(want)-ready[g])
		}
		inFlight += max(unavailable, awaited[g])
	}
	return BudgetOf(running, inFlight, minReplicas, fraction)
}

// BudgetOf is the budget of a workload with running pods (running, ready and not
// terminating) and inFlight pods being replaced, under spec.updatePolicy.minReplicas
// and the in-flight fraction, ratio 0–1 (--max-in-flight; DefaultMaxInFlight when ≤ 0
// or > 1): what NewBudget counts from the pods, and what gpufrac simulate starts each
// workload's cycle with.
func BudgetOf(running, inFlight int, minReplicas int32, fraction float64) Budget {
	if fraction <= 0 || fraction > 1 {
		fraction = DefaultMaxInFlight
	}
	return Budget{MinReplicas: minReplicas, Running: running, InFlight: inFlight,
		MaxInFlight: max(1, int(math.Floor(float64(running+inFlight)*fraction)))}
}

// controllerUID is the UID of p's controller ("" when none).
func controllerUID(p *corev1.Pod) types.UID {
	if c := metav1.GetControllerOf(p); c != nil {
		return c.UID
	}
	return ""
}

// Allow returns "" when one more eviction is allowed, else a skip reason
// (SkipMinReplicas, SkipInFlight) and a message.
func (b *Budget) Allow() (reason, msg string) {
	if int32(b.Running) < b.MinReplicas {
		if b.MinReplicas > 1 && b.Running+b.InFlight <= 1 {
			return SkipMinReplicas, fmt.Sprintf("%d running pod(s): a single replica is evicted only with minReplicas: 1", b.Running)
		}
		return SkipMinReplicas, fmt.Sprintf("%d running pod(s), minReplicas %d", b.Running, b.MinReplicas)
	}
	if b.InFlight >= b.MaxInFlight {
		return SkipInFlight, fmt.Sprintf("%d pod(s) being replaced, at most %d at once", b.InFlight, b.MaxInFlight)
	}
	return "", ""
}

// Took records one eviction.
func (b *Budget) Took() {
	b.Running--
	b.InFlight++
}
