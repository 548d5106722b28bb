package updater

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// Admission check: what the webhook wrote into a pod (its gpufrac.io/applied record's
// writtenMemory and writtenCompute) is compared with what the pod carries, read back
// through the record's backend. A scheduler extender or a later mutating webhook can
// rewrite the values, and a user can change the annotations of a running pod. A record
// that does not parse at all is reported too (invalidRecordsOf, reportInvalidRecords).

// Condition and event of the admission check.
const (
	// ConditionFractionMismatch (status.updater.conditions) is True while a pod of the
	// workload carries other values than its admission record says the webhook wrote;
	// the message names the pods, containers and both values. It is False (reason
	// FractionsMatch) once no pod differs, and absent before any pod ever did. A
	// difference is reported, never a reason to replace the pod: its replacement would be
	// rewritten the same way (an eviction loop). The decision compares the record with
	// the recommendation.
	ConditionFractionMismatch = "FractionMismatch"
	// ReasonBackendFieldsDiffer: FractionMismatch True.
	ReasonBackendFieldsDiffer = "BackendFieldsDiffer"
	// ReasonFractionsMatch: FractionMismatch False.
	ReasonFractionsMatch = "FractionsMatch"
	// EventFractionMismatch (Warning, autoscaler): pods carry other values than the
	// webhook wrote (once per message).
	EventFractionMismatch = "FractionMismatch"
)

// mismatchTolerance is the largest difference of memory, bytes, that is not a mismatch:
// every backend writes whole MiB, and a KAI gpu-fraction read back through a float may
// differ from the bytes it stands for by less than one.
const mismatchTolerance = backend.MiB - 1

// Mismatch is a difference between what the webhook wrote into one resource of a
// container and what the pod carries.
type Mismatch struct {
	// Container is the container's name; Resource is "memory" or "compute".
	Container, Resource string
	// Written is what the webhook wrote (the record's writtenMemory, bytes, or
	// writtenCompute, thousandths of one GPU).
	Written int64
	// Carried is what the pod carries now in the backend's fields, same unit; -1 when the
	// field is gone.
	Carried int64
}

// String renders "main: memory written 3Gi, carried 4Gi".
func (m Mismatch) String() string {
	f := fmtBytes
	if m.Resource == "compute" {
		f = fmtMilli
	}
	carried := "gone"
	if m.Carried >= 0 {
		carried = f(m.Carried)
	}
	return fmt.Sprintf("%s: %s written %s, carried %s", m.Container, m.Resource, f(m.Written), carried)
}

// AdmittedMismatches compares what the admission webhook wrote into pod (its applied
// record's writtenMemory and writtenCompute) with the backend fields the pod carries,
// read through the record's backend (backend.Codec.Read, before overheads are
// subtracted: the written values include them). Memory differing by less than one MiB matches. A pod without a valid
// record, resources the record does not say were written, and per-container annotation
// keys the annotations backend could not write (too long) are not compared. cfg must
// have defaults applied.
func AdmittedMismatches(pod *corev1.Pod, cfg backend.Config) []Mismatch {
	rec, err := gpufracv1.ParseApplied(pod.Annotations)
	if err != nil || rec == nil {
		return nil
	}
	codec := backend.New(cfg)[rec.Backend]
	if codec == nil {
		return nil
	}
	fields := codec.Read(pod)
	var out []Mismatch
	for _, ac := range rec.Containers {
		if !readableBack(rec.Backend, ac.Name, cfg) {
			continue
		}
		carried, ok := fields[ac.Name]
		if !ok {
			carried = backend.Allocation{Memory: -1, Compute: -1}
		}
		if w := ac.WrittenMemory; w != nil && differs(w.Value(), carried.Memory, mismatchTolerance) {
			out = append(out, Mismatch{Container: ac.Name, Resource: "memory", Written: w.Value(), Carried: carried.Memory})
		}
		if w := ac.WrittenCompute; w != nil && differs(w.MilliValue(), carried.Compute, 0) {
			out = append(out, Mismatch{Container: ac.Name, Resource: "compute", Written: w.MilliValue(), Carried: carried.Compute})
		}
	}
	return out
}

// differs reports whether carried (-1: gone) is not written within tolerance.
func differs(written, carried, tolerance int64) bool {
	return carried < 0 || carried > written+tolerance || carried < written-tolerance
}

// readableBack reports whether the backend's per-container fields of the container can
// be read back: the annotations backend writes no per-container keys for container names
// too long for an annotation key (only pod totals then).
func readableBack(bt gpufracv1.BackendType, container string, cfg backend.Config) bool {
	if bt != gpufracv1.BackendAnnotations {
		return true
	}
	key := cfg.Annotations.ContainerPrefix + container + gpufracv1.AnnotationContainerMemorySuffix
	return len(validation.IsQualifiedName(key)) == 0
}

// checkAdmitted is the plan's admission check: it sets the FractionMismatch condition
// from the plan's pods that are not going away and returns the condition's message ("":
// none differs).
func (p *plan) checkAdmitted(cfg backend.Config) string {
	var parts []string
	for _, pod := range p.pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		ms := AdmittedMismatches(pod, cfg)
		if len(ms) == 0 {
			continue
		}
		p.mismatched++
		s := make([]string, len(ms))
		for i, m := range ms {
			s[i] = m.String()
		}
		parts = append(parts, "pod "+pod.Name+" ("+strings.Join(s, "; ")+")")
	}
	st, gfa := p.st, p.gfa
	if len(parts) == 0 {
		if meta.FindStatusCondition(st.Conditions, ConditionFractionMismatch) != nil {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionFractionMismatch, Status: metav1.ConditionFalse,
				Reason: ReasonFractionsMatch, Message: "every pod carries the values its admission record says the webhook wrote", ObservedGeneration: gfa.Generation})
		}
		return ""
	}
	sort.Strings(parts)
	msg := fmt.Sprintf("%d pod(s) carry other GPU fraction values than the admission webhook wrote (gpufrac.io/applied), rewritten after admission by a scheduler extender, another webhook or a user: %s. The updater does not replace pods for this (a replacement would be rewritten the same way); they run with the values they carry",
		p.mismatched, strings.Join(parts, ", "))
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionFractionMismatch, Status: metav1.ConditionTrue,
		Reason: ReasonBackendFieldsDiffer, Message: truncate(msg, 1000), ObservedGeneration: gfa.Generation})
	return msg
}

// invalidRecordsOf returns, by pod name, the parse error of each of pods whose applied
// record (gpufrac.io/applied) does not parse (PodAllocation.RecordError); nil when none.
func invalidRecordsOf(pods []*corev1.Pod, allocs map[types.UID]PodAllocation) map[string]error {
	var out map[string]error
	for _, pod := range pods {
		if err := allocs[pod.UID].RecordError; err != nil {
			if out == nil {
				out = map[string]error{}
			}
			out[pod.Name] = err
		}
	}
	return out
}

// reportInvalidRecords reports the plan's pods whose applied record does not parse: a
// Warning AppliedRecordInvalid event on the autoscaler naming each pod with its parse
// error, and one error log line per pod, both once while the set of pods and errors
// stays the same (eventOnce). gpufrac_updater_pods_record_invalid counts them every
// cycle (planAll), and Evaluate never shrinks them (SkipRecordInvalid).
func (u *Updater) reportInvalidRecords(ctx context.Context, p *plan) {
	const key = "record-invalid"
	if len(p.invalidRecords) == 0 {
		u.forget(p.gfa, key)
		return
	}
	names := make([]string, 0, len(p.invalidRecords))
	for name := range p.invalidRecords {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("pod %s (%v)", name, p.invalidRecords[name])
	}
	note := fmt.Sprintf("%d pod(s) carry an admission record (%s) that does not parse: %s. What the webhook wrote into them is unknown, so they are never shrunk; "+
		"they are grown from their backend fields where those say less than the recommendation. Remove or fix the annotation (the webhook writes it; a pod without one is read from its backend fields)",
		len(names), gpufracv1.AnnotationApplied, strings.Join(parts, ", "))
	if u.noted[p.gfa.UID][key] != note {
		log := klog.FromContext(ctx)
		for _, name := range names {
			log.Error(p.invalidRecords[name], "Applied record does not parse; the pod is never shrunk", "pod", klog.KRef(p.gfa.Namespace, name),
				"autoscaler", klog.KObj(p.gfa), "annotation", gpufracv1.AnnotationApplied)
		}
	}
	u.eventOnce(p.gfa, key, corev1.EventTypeWarning, EventAppliedRecordInvalid, "Update", note)
}
