package recommender

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/workload"
)

// informerIndex is a synced pod informer over an indexer (podIndex).
type informerIndex struct{ cache.Indexer }

func (informerIndex) HasSynced() bool             { return true }
func (i informerIndex) GetIndexer() cache.Indexer { return i.Indexer }

// Pods read from the informer's namespace index give the recommendations that pods
// listed through the client give; and the index is what is read: a pod taken out of it
// is no longer matched.
func TestPodsFromInformerIndex(t *testing.T) {
	objs := append(deployment("ml", "sd", 3), deployment("ml", "tts", 2)...)
	objs = append(objs, deployment("other", "llm", 2)...)
	objs = append(objs, gfa("ml", "sd", "sd"), gfa("ml", "tts", "tts"), gfa("other", "llm", "llm"))
	listed := newHarness(t, objs, promFor(objs, 20*gib, 0.3))
	indexed := newHarness(t, objs, promFor(objs, 20*gib, 0.3))
	ix := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var first *corev1.Pod
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			slim, err := workload.SlimPod(p.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			if err := ix.Add(slim); err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = slim.(*corev1.Pod)
			}
		}
	}
	indexed.rec.podIndex = informerIndex{ix}
	ctx := context.Background()
	for _, h := range []*harness{listed, indexed} {
		if err := h.rec.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range [][2]string{{"ml", "sd"}, {"ml", "tts"}, {"other", "llm"}} {
		want, got := listed.gfr(t, k[0], k[1]), indexed.gfr(t, k[0], k[1])
		if want.Status.MatchedPods == 0 || len(want.Status.ContainerRecommendations) == 0 {
			t.Fatalf("%s/%s: no pods or no recommendation when listed: %+v", k[0], k[1], want.Status)
		}
		// Conditions carry the wall-clock time of their last change (metav1.Now), which
		// differs when the two cycles straddle a second.
		for _, st := range []*gpufracv1.GPUFractionRecommendationStatus{&got.Status, &want.Status} {
			for i := range st.Conditions {
				st.Conditions[i].LastTransitionTime = metav1.Time{}
			}
		}
		if !equality.Semantic.DeepEqual(got.Status, want.Status) {
			t.Errorf("%s/%s from the index:\n%+v\nlisted:\n%+v", k[0], k[1], got.Status, want.Status)
		}
	}
	if err := ix.Delete(first); err != nil {
		t.Fatal(err)
	}
	indexed.now = indexed.now.Add(time.Minute)
	if err := indexed.rec.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := indexed.gfr(t, "ml", "sd").Status.MatchedPods; got != 2 {
		t.Errorf("after a pod left the index: %d pods matched, want 2", got)
	}
}
