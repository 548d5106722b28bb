package admission

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	goruntime "runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/scheme"
)

// benchServer returns the pod webhook's HTTP handler over a fake cache holding n
// Deployments (each with a ReplicaSet, an autoscaler and a recommendation) in one
// namespace, and the AdmissionReview body of a new pod of deployment 0.
func benchServer(b *testing.B, n int, backend gpufracv1.BackendType, indexer bool) (http.Handler, []byte) {
	m := benchMutator(b, n, backend, indexer)
	pod := podOf(gpuContainer("main", 1), gpuContainer("sidecar", 0))
	pod.OwnerReferences[0].Name = "web-0-abc"
	raw, _ := json.Marshal(pod)
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bench", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: testNS, Operation: admissionv1.Create, Object: rawExt(raw),
		},
	}
	body, _ := json.Marshal(review)
	return podWebhook(m), body
}

// benchMutator returns a Mutator over a cache holding n Deployments web-<i> (each with
// a ReplicaSet web-<i>-abc, an autoscaler with backend and a recommendation for
// container main: 4Gi, 350m) in one namespace: client-go indexers as the informer cache
// (indexer), else controller-runtime's fake client.
func benchMutator(b *testing.B, n int, backend gpufracv1.BackendType, indexer bool) *Mutator {
	var objs []client.Object
	ctrl := true
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		objs = append(objs,
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, UID: types.UID(name)}},
			&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name + "-abc", UID: types.UID(name + "-rs"),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: name, UID: types.UID(name), Controller: &ctrl}}}},
		)
		gfa := autoscaler(name, gpufracv1.UpdateModeRecreate, backend)
		gfa.Spec.TargetRef.Name = name
		objs = append(objs, gfa, recommendation(name, 80, containerRec("main", "4Gi", "350m")))
	}
	var r client.Reader = newFakeReader(b, objs...)
	if indexer {
		r = newMemCache(objs...)
	}
	return NewMutator(r, scheme.MustNew(), Config{})
}

// benchPost posts the AdmissionReview body to h b.N times, fails on a response that ok
// rejects (by status code and body), and reports the p50 and p99 latency per request.
// Each request is served on a new goroutine, as net/http's HTTP/2 server runs each
// stream's handler (http2serverConn.runHandler): its stack starts small and grows while
// the request is served, which a handler called on the benchmark's own goroutine (grown
// once, then reused) never shows.
func benchPost(b *testing.B, h http.Handler, body []byte, ok func(code int, out []byte) bool) {
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, MutatePodsPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		start := time.Now()
		go func() {
			h.ServeHTTP(w, req)
			done <- struct{}{}
		}()
		<-done
		lat = append(lat, time.Since(start))
		if out := w.Body.Bytes(); !ok(w.Code, out) {
			b.Fatalf("status %d body %s", w.Code, out)
		}
	}
	b.StopTimer()
	// CPU time of the whole process (every thread: handler, garbage collector, stack
	// copies) per request: on the shared benchmark machine it moves far less with the
	// load than ns/op, which counts the time the requests wait for a core.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(len(lat)), "cpu-ns/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkMutatePod measures the pod webhook's whole HTTP exchange (AdmissionReview
// decode, cache reads, backend, JSON patch, response encode) and reports p50 and p99
// per request. cache=indexer reads through client-go indexers as the informer cache
// does; cache=fake is controller-runtime's fake client, which lists every object of a
// type and converts through the scheme on every read (an upper bound).
func BenchmarkMutatePod(b *testing.B) {
	for _, cache := range []string{"indexer", "fake"} {
		for _, backend := range []gpufracv1.BackendType{gpufracv1.BackendHAMi, gpufracv1.BackendKAI, gpufracv1.BackendMPS, gpufracv1.BackendAnnotations} {
			for _, n := range []int{1, 500} {
				b.Run(fmt.Sprintf("cache=%s/%s/autoscalers=%d", cache, backend, n), func(b *testing.B) {
					h, body := benchServer(b, n, backend, cache == "indexer")
					benchPost(b, h, body, func(code int, out []byte) bool {
						return code == http.StatusOK && bytes.Contains(out, []byte(`"patch"`))
					})
				})
			}
		}
	}
}

// BenchmarkServePod is the pod webhook's full request path as the server registers it
// (podWebhook: instrument and the handler's ServeHTTP) on the AdmissionReview the API
// server sends for a ReplicaSet's new pod after its built-in admission (defaults,
// service-account volume, tolerations, managedFields: testdata/pod-create-review.json,
// 4.9 KB), over 500 autoscalers in an indexer-backed cache. patched=false is a pod
// whose workload has no autoscaler (admitted unchanged). It checks each response is
// 200 with the request's UID and, when patched, a JSONPatch.
func BenchmarkServePod(b *testing.B) {
	body, err := os.ReadFile("testdata/pod-create-review.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		backend gpufracv1.BackendType
		patched bool
	}{{gpufracv1.BackendAnnotations, true}, {gpufracv1.BackendHAMi, true}, {gpufracv1.BackendKAI, true}, {gpufracv1.BackendAnnotations, false}} {
		b.Run(fmt.Sprintf("%s/patched=%t", c.backend, c.patched), func(b *testing.B) {
			body := body
			if !c.patched {
				body = bytes.ReplaceAll(body, []byte(`web-0-abc`), []byte(`web-none-abc`))
			}
			m := benchMutator(b, 500, c.backend, true)
			if !c.patched {
				ctrl := true
				m.Reader = newMemCache(&metav1.PartialObjectMetadata{
					TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
					ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web-none-abc", OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web-none", Controller: &ctrl}}}})
			}
			h := podWebhook(m)
			want := []byte(`"uid":"0b1d2c3e-4f50-4a61-8b72-93a4b5c6d7e8"`)
			benchPost(b, h, body, func(code int, out []byte) bool {
				return code == http.StatusOK && bytes.Contains(out, want) && bytes.Contains(out, []byte(`"patchType":"JSONPatch"`)) == c.patched
			})
		})
	}
}

// processCPU returns the user and system CPU time of the process so far, nanoseconds
// (getrusage RUSAGE_SELF).
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func rawExt(b []byte) runtime.RawExtension { return runtime.RawExtension{Raw: b} }

// BenchmarkServePodTLS is the pod webhook's request path behind a TLS server, as the
// manager's webhook server runs it, for the AdmissionReview of BenchmarkServePod
// (annotations backend, patched, 500 autoscalers), from one client over HTTP/2 (one
// connection; the server reads frames, runs each stream's handler and writes its frames
// on separate goroutines) or HTTP/1.1 (keep-alive connections, each read, served and
// written by one goroutine). conc 1 is one request at a time, else conc × GOMAXPROCS
// requests in flight (RunParallel). cpu-ns/op is the
// CPU time of the whole process, client included, per request.
func BenchmarkServePodTLS(b *testing.B) {
	body, err := os.ReadFile("testdata/pod-create-review.json")
	if err != nil {
		b.Fatal(err)
	}
	for _, proto := range []string{"h2", "http1.1"} {
		for _, conc := range []int{1, 8} {
			b.Run(fmt.Sprintf("proto=%s/conc=%d", proto, conc), func(b *testing.B) {
				srv := httptest.NewUnstartedServer(podWebhook(benchMutator(b, 500, gpufracv1.BackendAnnotations, true)))
				srv.EnableHTTP2 = proto == "h2"
				srv.StartTLS()
				defer srv.Close()
				client := srv.Client()
				// As many idle connections as requests in flight: no connection is set up
				// twice (RunParallel runs conc × GOMAXPROCS goroutines).
				client.Transport.(*http.Transport).MaxIdleConnsPerHost = conc * goruntime.GOMAXPROCS(0)
				post := func() error {
					resp, err := client.Post(srv.URL+MutatePodsPath, "application/json", bytes.NewReader(body))
					if err != nil {
						return err
					}
					defer resp.Body.Close()
					out, err := io.ReadAll(resp.Body)
					if err == nil && (resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"patchType":"JSONPatch"`))) {
						err = fmt.Errorf("status %d body %s", resp.StatusCode, out)
					}
					if want := map[bool]int{true: 2, false: 1}[proto == "h2"]; err == nil && resp.ProtoMajor != want {
						err = fmt.Errorf("served over %s, want %s", resp.Proto, proto)
					}
					return err
				}
				if err := post(); err != nil { // connection set up outside the measurement
					b.Fatal(err)
				}
				b.ReportAllocs()
				cpu0 := processCPU(b)
				b.ResetTimer()
				b.SetParallelism(conc)
				n := atomic.Int64{}
				if conc == 1 {
					for b.Loop() {
						if err := post(); err != nil {
							b.Fatal(err)
						}
						n.Add(1)
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if err := post(); err != nil {
								b.Error(err)
								return
							}
							n.Add(1)
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(n.Load()), "cpu-ns/op")
			})
		}
	}
}
