package updater

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
)

// An OnDelete DaemonSet rolled back (kubectl rollout undo: its template back to
// revision x, at generation 3) counts a pod updated by its revision hash as well as by
// its template generation: a pod created from x before (generation 1) is at the
// DaemonSet's template, and its replacement would get the same template. With a pod
// at generation 3 showing x's hash, the generation-1 pod is replaced for its fraction
// as any pod; the generation-2 pod (hash y) is held, since its deletion rolls out the
// restored template. Before, every pod at another generation than 3 was held
// (unreleased-revision, also for protective growth), the generation-1 pod told that
// replacing it 'would roll out the newer template'. Without a pod at generation 3 the
// template's hash is not known: both are held, and the message says that pods run the
// template by revision hash.
func TestOnDeleteDaemonSetRolledBack(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gens    []string // each pod's pod-template-generation
		hashes  []string // and controller-revision-hash
		updated int32    // status.updatedNumberScheduled
		evicted string   // the pod evicted ("": none)
		msg     string   // in the held pods' skip message
	}{
		{"a pod at the rolled-back generation", []string{"1", "3", "2"}, []string{"x", "x", "y"}, 2, "web-abc-0", "whose template is at generation 3"},
		{"no pod at the rolled-back generation", []string{"1", "2"}, []string{"x", "y"}, 1, "", "1 pod(s) run its template by revision hash"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, gpufracv1.UpdateModeRecreate, gpufracv1.BackendHAMi, len(tc.gens), 3)
			f.gfa.Spec.UpdatePolicy.MinReplicas = ptr.To[int32](1)
			f.gfa.Spec.TargetRef.Kind = "DaemonSet"
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", UID: "ds-uid", Generation: 3,
				Annotations: map[string]string{daemonSetTemplateGenerationAnnotation: "3"}}}
			ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
			ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: int32(len(tc.gens)), UpdatedNumberScheduled: tc.updated}
			f.objs = append(f.objs, ds)
			for i, p := range f.pods {
				p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "web", UID: ds.UID, Controller: ptr.To(true)}}
				p.Labels[daemonSetPodTemplateGenerationLabel] = tc.gens[i]
				p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] = tc.hashes[i]
				p.Spec.NodeName = []string{"n1", "n2", "n3"}[i]
			}
			f.build()
			f.run()
			live := f.livePods()
			var evicted []string
			for _, p := range f.pods {
				if !live[p.Name] {
					evicted = append(evicted, p.Name)
				}
			}
			st := f.status()
			if want := []string{tc.evicted}; tc.evicted == "" && len(evicted) != 0 || tc.evicted != "" && (len(evicted) != 1 || evicted[0] != want[0]) {
				t.Fatalf("evicted %v, want %q (updates %+v)", evicted, tc.evicted, st.Updates)
			}
			held := 0
			for _, u := range st.Updates {
				gen := tc.gens[strings.LastIndexByte("012", u.Pod[len(u.Pod)-1])]
				if u.Pod == tc.evicted || gen == "3" {
					continue // replaced, or held by the budget only
				}
				held++
				if u.SkipReason != SkipUnreleasedRevision || !strings.Contains(u.SkipMessage, tc.msg) || strings.Contains(u.SkipMessage, "the newer template") {
					t.Errorf("%s: skip %s %q, want %s saying %q", u.Pod, u.SkipReason, u.SkipMessage, SkipUnreleasedRevision, tc.msg)
				}
			}
			want := -len(evicted)
			for _, g := range tc.gens {
				if g != "3" {
					want++
				}
			}
			if held != want {
				t.Errorf("updates %+v: %d pods held as unreleased, want %d", st.Updates, held, want)
			}
		})
	}
}
