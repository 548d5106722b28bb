package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpufrac/gpufrac/e2e/framework"
	"github.com/gpufrac/gpufrac/trace"
)

// Namespaces are labelled ShardLabel=a or b alternately; --shards 2 runs one
// recommender per value (--shard-namespace-selector ShardLabel=a).
const ShardLabel = "gpufrac.io/bench-shard"

// batchWorkloads bounds the workloads synthesized at once: a trace holds its samples as
// time.Time points (32 bytes each), 50 workloads × 5 pods × 8 days ≈ 0.3 GB.
const batchWorkloads = 50

// plan is what the bench creates: namespaces bench-00, bench-01, ... with the workloads
// spread evenly, each namespace synthesized in batches of batchWorkloads workloads named
// w<batch>-NNN.
type plan struct {
	o   options
	end time.Time
	// series and samples count what the backfill wrote.
	series, samples int
	// replicaSets maps each workload (namespace, Deployment) to the ReplicaSet and
	// pods its backfilled series name (trace.Pod.ReplicaSet, .Pod): create makes them
	// with these names, so the live pods are the ones whose series Prometheus holds.
	replicaSets map[[2]string]traceReplicaSet
}

// traceReplicaSet is a workload's ReplicaSet and pod names in the synthesized trace.
type traceReplicaSet struct {
	name string
	pods []string
}

// ControllersOff are the kube-controller-manager controllers the bench turns off: it
// creates each Deployment's ReplicaSet and pods itself, named as the synthesized series
// name them (a Deployment's own ReplicaSet and pods get random names, which no
// backfilled series carries: every live pod would be silent, and since a running pod
// that never reports is a gap, every autoscaler would sit in NoSamplesWhileRunning).
var ControllersOff = []string{"deployment-controller", "replicaset-controller"}

func newPlan(o options, begin time.Time) *plan {
	return &plan{o: o, end: begin.Add(o.Lead), replicaSets: map[[2]string]traceReplicaSet{}}
}

// span is the length of the synthesized series: the history before the start, the
// lead after it, and an hour for the setup before the recommender starts (the
// bootstrap reads the history before its own start).
func (p *plan) span() time.Duration { return p.o.History + p.o.Lead + time.Hour }

func (p *plan) namespace(i int) string { return namespaceName(i) }

// namespaceName is the name of the i-th namespace.
func namespaceName(i int) string { return fmt.Sprintf("bench-%02d", i) }

// shardNamespaces returns the namespaces of a shard ("" for all).
func shardNamespaces(o options, label string) []string {
	var out []string
	for i := range o.Namespaces {
		if label == "" || shard(i) == label {
			out = append(out, namespaceName(i))
		}
	}
	return out
}

// shard is the ShardLabel value of namespace i.
func shard(i int) string { return string(rune('a' + i%2)) }

// batches calls fn with the synthesis options of every batch.
func (p *plan) batches(fn func(trace.SynthOptions) error) error {
	perPod := p.o.Pods / p.o.Workloads
	for i := range p.o.Namespaces {
		n := p.o.Workloads / p.o.Namespaces
		if i < p.o.Workloads%p.o.Namespaces {
			n++
		}
		for b := 0; b*batchWorkloads < n; b++ {
			err := fn(trace.SynthOptions{
				Workloads: min(batchWorkloads, n-b*batchWorkloads), PodsPerWorkload: perPod,
				Duration: p.span(), Step: time.Minute,
				Seed: uint64(1000*i + b + 1), End: p.end, Namespace: p.namespace(i),
				WorkloadPrefix: fmt.Sprintf("w%02d", b),
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// blockSpan is the time one backfilled block covers. A TSDB block writer holds its
// block's samples in memory until it writes them: one block of 10,000 pods × 8 days
// took more than 11 GiB before it was stopped, two days' block about a quarter of it.
// Longer than half of Prometheus' largest compaction range (54h at the cluster's 30-day
// retention), so no two blocks fit one range and Prometheus compacts none of them
// while the bench measures it.
const blockSpan = 48 * time.Hour

// backfill synthesizes every batch and appends its series into TSDB blocks in dataDir,
// one per blockSpan of the series' span (newest first), synthesizing the batches again
// for each block; it returns each batch's manifests (trace.WriteManifests).
func (p *plan) backfill(ctx context.Context, dataDir string) ([][]byte, error) {
	var manifests [][]byte
	err := eachBlock(ctx, dataDir, p.end.Add(-p.span()), p.end, blockSpan, func(bw *blockWriter, newest bool) error {
		err := p.batches(func(so trace.SynthOptions) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			t := trace.Synthesize(so)
			if newest {
				m, err := p.manifests(t)
				if err != nil {
					return err
				}
				manifests = append(manifests, m)
			}
			return bw.add(ctx, t, trace.OpenMetricsOptions{})
		})
		p.series, p.samples = max(p.series, bw.Series), p.samples+bw.Samples
		return err
	})
	return manifests, err
}

// manifests records t's ReplicaSets and pods (replicaSets) and returns its manifests.
func (p *plan) manifests(t trace.Trace) ([]byte, error) {
	for _, w := range t.Workloads() {
		rs := traceReplicaSet{name: t.Pods[w.Pods[0]].ReplicaSet}
		for _, i := range w.Pods {
			if !slices.Contains(rs.pods, t.Pods[i].Pod) {
				rs.pods = append(rs.pods, t.Pods[i].Pod)
			}
		}
		p.replicaSets[[2]string{w.Namespace, w.Name}] = rs
	}
	var buf bytes.Buffer
	if err := trace.WriteManifests(&buf, t, trace.ManifestOptions{}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// create makes the labelled namespaces and the Deployments and autoscalers of the
// manifests (without their latency guardrail unless --guardrail), and for each
// Deployment the ReplicaSet and pods of its series (replicaSets; the controllers that
// would make others are off, ControllersOff), with 8 parallel writers.
func (p *plan) create(ctx context.Context, c *framework.Cluster, manifests [][]byte) error {
	for i := range p.o.Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.namespace(i), Labels: map[string]string{ShardLabel: shard(i)}}}
		if err := c.Client.Create(ctx, ns); err != nil {
			return fmt.Errorf("create namespace %s: %w", ns.Name, err)
		}
	}
	var objs []*unstructured.Unstructured
	for _, m := range manifests {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(m), 1<<16)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return err
			}
			switch u.GetKind() {
			case "Namespace": // made above, with the shard label
				continue
			case "GPUFractionAutoscaler":
				if !p.o.Guardrail {
					unstructured.RemoveNestedField(u.Object, "spec", "latencyGuardrail")
				}
			}
			objs = append(objs, u)
		}
	}
	cfg := *c.RESTConfig
	cfg.QPS, cfg.Burst = 500, 1000
	cl, err := client.New(&cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		return err
	}
	work := make(chan *unstructured.Unstructured)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for u := range work {
				err := cl.Create(ctx, u)
				if err == nil && u.GetKind() == "Deployment" {
					err = p.createReplicaSet(ctx, cl, u)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("create %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err))
					mu.Unlock()
				}
			}
		})
	}
	for _, u := range objs {
		work <- u
	}
	close(work)
	wg.Wait()
	logf("created %d objects", len(objs))
	return errors.Join(errs...)
}

// createReplicaSet creates the ReplicaSet of the created Deployment u, named as its
// series name it, controlled by u, and its pods, named likewise and controlled by it,
// each from u's pod template, as the Deployment and ReplicaSet controllers would.
func (p *plan) createReplicaSet(ctx context.Context, cl client.Client, u *unstructured.Unstructured) error {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return err
	}
	trs, ok := p.replicaSets[[2]string{d.Namespace, d.Name}]
	if !ok {
		return fmt.Errorf("no ReplicaSet of Deployment %s/%s in the synthesized trace", d.Namespace, d.Name)
	}
	controller := func(kind, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: trs.name, Labels: d.Spec.Template.Labels,
			OwnerReferences: controller("Deployment", d.Name, d.UID)},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(len(trs.pods))), Selector: d.Spec.Selector, Template: d.Spec.Template},
	}
	if err := cl.Create(ctx, rs); err != nil {
		return err
	}
	for _, name := range trs.pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: name, Labels: d.Spec.Template.Labels,
				Annotations: d.Spec.Template.Annotations, OwnerReferences: controller("ReplicaSet", rs.Name, rs.UID)},
			Spec: *d.Spec.Template.Spec.DeepCopy(),
		}
		if err := cl.Create(ctx, pod); err != nil {
			return err
		}
	}
	return nil
}

// waitRunning waits until --pods pods are Running (KWOK reports them so once
// scheduled), up to 30 minutes.
func (p *plan) waitRunning(ctx context.Context, c *framework.Cluster) error {
	deadline := time.Now().Add(30 * time.Minute)
	last := -1
	for {
		running := 0
		for i := range p.o.Namespaces {
			var pods corev1.PodList
			if err := c.Client.List(ctx, &pods, client.InNamespace(p.namespace(i))); err != nil {
				return err
			}
			for _, pod := range pods.Items {
				if pod.Status.Phase == corev1.PodRunning {
					running++
				}
			}
		}
		if running >= p.o.Pods {
			return nil
		}
		if running != last {
			logf("%d of %d pods Running", running, p.o.Pods)
			last = running
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d pods Running after 30 minutes", running, p.o.Pods)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}
