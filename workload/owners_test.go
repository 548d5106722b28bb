package workload

import (
	"context"
	"runtime/debug"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gpufrac/gpufrac/internal/scheme"
)

// TestTopControllerOwnerCycle: owner references are written by any controller or user,
// and the API server accepts a cycle (a ReplicaSet that names itself as controller, or
// a ReplicaSet and a Job that control each other). The owner chain of such a pod ends
// at the first owner met twice instead of recursing without end (a stack overflow is
// fatal: it would take the webhook, the recommender and the updater down with every
// pod); a chain without a cycle still reaches its top.
func TestTopControllerOwnerCycle(t *testing.T) {
	// A small stack turns an endless recursion into a quick crash of this test.
	defer debug.SetMaxStack(debug.SetMaxStack(16 << 20))
	ctrl := func(kind, name string) []metav1.OwnerReference {
		api := "apps/v1"
		if kind == "Job" {
			api = "batch/v1"
		}
		return []metav1.OwnerReference{{APIVersion: api, Kind: kind, Name: name, UID: types.UID("uid-" + name), Controller: ptr.To(true)}}
	}
	self := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "self", UID: "uid-self", OwnerReferences: ctrl("ReplicaSet", "self")}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rs", UID: "uid-rs", OwnerReferences: ctrl("Job", "job")}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", UID: "uid-job", OwnerReferences: ctrl("ReplicaSet", "rs")}}
	web := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-abc", UID: "uid-web-abc", OwnerReferences: ctrl("Deployment", "web")}}
	c := fake.NewClientBuilder().WithScheme(scheme.MustNew()).WithObjects(self, rs, job, web).Build()
	o := &Owners{Reader: c}
	for _, tc := range []struct {
		owner string // the pod's controller, a ReplicaSet
		want  Ref
	}{
		{"self", Ref{Namespace: "ns", Kind: "ReplicaSet", Name: "self"}},
		{"rs", Ref{Namespace: "ns", Kind: "ReplicaSet", Name: "rs"}},
		{"web-abc", Ref{Namespace: "ns", Kind: "Deployment", Name: "web"}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p-" + tc.owner, OwnerReferences: ctrl("ReplicaSet", tc.owner)}}
		if got, ok := o.TopController(context.Background(), pod); !ok || got != tc.want {
			t.Errorf("pod of ReplicaSet %s: top %v %v, want %v", tc.owner, got, ok, tc.want)
		}
	}
}
