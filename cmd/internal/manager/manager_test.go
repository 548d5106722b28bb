package manager

import (
	"flag"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The shared flags keep the names and defaults the charts and docs use.
func TestFlags(t *testing.T) {
	fs := flag.NewFlagSet("recommender", flag.ContinueOnError)
	var f Flags
	f.AddFlags(fs, "runs cycles")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (Flags{MetricsAddr: ":8080", ProbeAddr: ":8081", LeaderElect: true, PprofAddr: "0"}); f != want {
		t.Errorf("defaults %+v, want %+v", f, want)
	}
	if err := fs.Parse([]string{"--metrics-bind-address=0", "--health-probe-bind-address=:9000", "--leader-elect=false", "--leader-election-namespace=gpufrac", "--pprof-bind-address=127.0.0.1:6060"}); err != nil {
		t.Fatal(err)
	}
	if want := (Flags{MetricsAddr: "0", ProbeAddr: ":9000", LeaderElectionNamespace: "gpufrac", PprofAddr: "127.0.0.1:6060"}); f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	if u := fs.Lookup("leader-elect").Usage; u != "Elect a leader through a Lease so only one replica runs cycles." {
		t.Errorf("--leader-elect usage %q", u)
	}
}

func TestCacheOptionsStripManagedFields(t *testing.T) {
	c := cacheOptions([]string{"a", "b"}, nil)
	if len(c.DefaultNamespaces) != 2 {
		t.Errorf("namespaces %v, want a and b", c.DefaultNamespaces)
	}
	if all := cacheOptions(nil, nil); all.DefaultNamespaces != nil {
		t.Errorf("no namespaces given, cache limited to %v", all.DefaultNamespaces)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "x"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}}}
	out, err := c.DefaultTransform(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if got.ManagedFields != nil || got.Labels["app"] != "x" || got.Name != "p" {
		t.Errorf("transformed pod %+v: want managedFields gone, the rest kept", got.ObjectMeta)
	}
}

// A pod transform replaces the managedFields strip for pods only.
func TestCacheOptionsPodTransform(t *testing.T) {
	called := false
	c := cacheOptions(nil, func(obj any) (any, error) { called = true; return obj, nil })
	if len(c.ByObject) != 1 {
		t.Fatalf("ByObject %v, want pods only", c.ByObject)
	}
	for obj, by := range c.ByObject {
		if _, ok := obj.(*corev1.Pod); !ok || by.Transform == nil {
			t.Fatalf("ByObject %T %+v, want the pod transform", obj, by)
		}
		if _, err := by.Transform(&corev1.Pod{}); err != nil || !called {
			t.Errorf("pod transform not the one given (called %v, err %v)", called, err)
		}
	}
	if c.DefaultTransform == nil {
		t.Error("other objects lost the managedFields strip")
	}
}
