package recommender

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/promreg"
	"github.com/gpufrac/gpufrac/recommender/history"
)

// Checkpoints, as VPA's recommender keeps VerticalPodAutoscalerCheckpoints: with
// Config.Checkpoints, each cycle saves the model of the workloads whose model changed
// since their last checkpoint at least CheckpointInterval ago into one
// GPUFractionCheckpoint per autoscaler in charge (same name, owned by it, so garbage
// collection deletes it with the autoscaler), at most CheckpointWritesPerCycle of them,
// oldest first. The first cycle of a process (a restart, or a new leader) lists them
// before it loads: a workload with a valid checkpoint younger than HistoryLength is
// restored and reads from Prometheus only what came after it; any other (none, another
// version or options, another workload, too old, undecodable) is ignored, logged and
// counted in gpufrac_recommender_checkpoints_ignored_total, and the workload bootstraps
// from Prometheus as without checkpoints: a broken checkpoint costs a longer load,
// never data.

// Checkpoint metrics (registered by Register).
var (
	checkpointsWritten  = promreg.Counter("gpufrac_recommender_checkpoints_written_total", "GPUFractionCheckpoint writes (create or patch) that succeeded.")
	checkpointsRestored = promreg.Counter("gpufrac_recommender_checkpoints_restored_total", "Workload models restored from a GPUFractionCheckpoint at start.")
	checkpointsIgnored  = promreg.CounterVec("gpufrac_recommender_checkpoints_ignored_total",
		"GPUFractionCheckpoints not restored (the workload bootstraps from Prometheus), or not written, by reason (list_failed, other_autoscaler, target_changed, version, options, too_old, decode, write_failed, too_large).", "reason")
)

// Reasons of gpufrac_recommender_checkpoints_ignored_total.
const (
	ckptListFailed      = "list_failed"      // listing the checkpoints failed: every workload bootstraps
	ckptOtherAutoscaler = "other_autoscaler" // owned by another autoscaler of the same name (deleted and created again)
	ckptTargetChanged   = "target_changed"   // of another workload than the autoscaler's target now
	ckptVersion         = "version"          // another CheckpointModelVersion
	ckptOptions         = "options"          // other model options (history.Options)
	ckptTooOld          = "too_old"          // SamplesUntil older than HistoryLength, or in the future
	ckptDecode          = "decode"           // does not decode (history.Model.Restore)
	ckptWriteFailed     = "write_failed"     // a write the API server refused
	ckptTooLarge        = "too_large"        // above MaxCheckpointBytes: not written
)

// DefaultCheckpointInterval is the default Config.CheckpointInterval: 30 minutes.
// Measured with make bench-scale RESTART=1 (docs/benchmarks.md, "Results, 2026-12-02:
// restart from checkpoints"): a restart at 10,000 pods read 16.5 minutes after its
// oldest checkpoint in 27 s, so 30 minutes plus the downtime stays within issue 17's
// 2-minute bootstrap; and one write of an 8-day checkpoint (12 KiB) cost the
// recommender about 4 ms of CPU, so 2,000 autoscalers every 10 minutes would add about
// 0.8 s to a steady cycle against its 2 s goal, every 30 minutes about 0.27 s. VPA
// writes every loop (1 minute) within a time budget; its checkpoints are per container
// and smaller.
const DefaultCheckpointInterval = 30 * time.Minute

// MaxCheckpointBytes bounds one checkpoint's encoded status: 1 MiB, under etcd's
// default 1.5 MiB request limit with room for the object's metadata. A container with
// every hour of the day seen takes about 25 KiB, so only a workload of dozens of
// containers or thousands of pods in the peak window comes near it; it is then not
// checkpointed (counted as too_large) and bootstraps from Prometheus.
const MaxCheckpointBytes = 1 << 20

// checkpointListPage is how many checkpoints one list request returns, so that a
// restore holds one page of objects at a time.
const checkpointListPage = 100

// minCheckpointWrites is the least checkpoint writes per cycle with the automatic bound
// (VPA's --min-checkpoints default).
const minCheckpointWrites = 10

// checkpointMark is what was last saved of a workload: when (the end of the samples it
// holds) and the model's version then (history.Model.Version).
type checkpointMark struct {
	at      time.Time
	version uint64
}

// checkpointWrites is the most checkpoints one cycle writes: CheckpointWritesPerCycle,
// or with 0 twice the tracked workloads' share of one cycle of CheckpointInterval (so a
// backlog, such as every workload after a bootstrap, clears in half the interval), at
// least minCheckpointWrites.
func (r *Recommender) checkpointWrites() int {
	if n := r.Config.CheckpointWritesPerCycle; n > 0 {
		return n
	}
	per := float64(2*len(r.tracked)) * r.Config.Interval.Seconds() / r.Config.CheckpointInterval.Seconds()
	return max(minCheckpointWrites, int(per+0.999))
}

// maintainCheckpoints writes the due checkpoints (see the package's checkpoint notes)
// after a cycle whose load succeeded. A failed write is logged and counted, never an
// error of the cycle: the model stays in memory and the write is retried next cycle.
func (r *Recommender) maintainCheckpoints(ctx context.Context, c *cycle) error {
	if !r.Config.Checkpoints || c.loadErr != nil {
		return nil
	}
	type due struct {
		e    *entry
		w    history.WorkloadKey
		last time.Time
	}
	var dues []due
	for _, e := range c.entries {
		if e.targetErr != nil || c.byRef[e.ref] != e {
			continue
		}
		w := history.WorkloadKey(e.ref)
		t, v := r.tracked[w], r.model.Version(w)
		if t == nil || !t.bootstrapped || v == 0 {
			continue
		}
		m, ok := r.checkpoints[w]
		if ok && (m.version == v || c.now.Sub(m.at) < r.Config.CheckpointInterval) {
			continue
		}
		dues = append(dues, due{e, w, m.at})
	}
	slices.SortFunc(dues, func(a, b due) int {
		return cmp.Or(a.last.Compare(b.last), cmp.Compare(a.e.gfa.Namespace, b.e.gfa.Namespace), cmp.Compare(a.e.gfa.Name, b.e.gfa.Name))
	})
	dues = dues[:min(len(dues), r.checkpointWrites())]
	// Each checkpoint is built in turn (the model is read by this goroutine only) and
	// written Config.StatusWriteConcurrency at once, as the statuses are: one at a time,
	// the 134 due each steady cycle at 2,000 workloads waited for 134 round trips.
	writes := r.newWrites(len(dues))
	for i, d := range dues {
		write, err := r.checkpointWrite(ctx, d.e, d.w, r.lastLoad)
		if err != nil {
			writes.errs[i] = err
			continue
		}
		writes.start(i, write)
	}
	errs := writes.wait()
	log := klog.FromContext(ctx)
	for i, d := range dues {
		if err := errs[i]; deleted(err) {
			log.V(1).Info("Autoscaler or namespace deleted during the cycle; no checkpoint written", "autoscaler", klog.KObj(d.e.gfa), "err", err)
			continue
		} else if err != nil {
			log.Error(err, "Writing checkpoint failed; retried next cycle", "autoscaler", klog.KObj(d.e.gfa))
			continue
		}
		// The model is unchanged since the checkpoint was built: only this goroutine
		// feeds it, and the writes do not.
		r.checkpoints[d.w] = checkpointMark{at: r.lastLoad, version: r.model.Version(d.w)}
	}
	return nil
}

// checkpointWrite builds the checkpoint of workload w's model, whose samples end at
// until, for autoscaler e, and returns its write, which changes no recommender state
// (so that several run at once): a JSON patch that replaces spec and status whole (as
// VPA's checkpoint writer) and sets e's autoscaler as its owner (ownedBy), or a create
// when there is none (tried first when this process has neither written nor restored one
// for w). Its errors: the model's that cannot be saved, a checkpoint above
// MaxCheckpointBytes; the write's, the API server's.
func (r *Recommender) checkpointWrite(ctx context.Context, e *entry, w history.WorkloadKey, until time.Time) (func() error, error) {
	containers, err := r.model.SaveCheckpoint(w)
	if err != nil {
		checkpointsIgnored.WithLabelValues(ckptDecode).Inc()
		return nil, err
	}
	gfa := e.gfa
	cp := &gpufracv1.GPUFractionCheckpoint{
		ObjectMeta: ownedBy(gfa),
		Spec:       gpufracv1.GPUFractionCheckpointSpec{AutoscalerName: gfa.Name, WorkloadKind: w.Kind, WorkloadName: w.Name},
		Status: gpufracv1.GPUFractionCheckpointStatus{
			ModelVersion: gpufracv1.CheckpointModelVersion,
			Options:      r.model.Options().CheckpointOptions(),
			SamplesUntil: metav1.NewMicroTime(until),
			Containers:   containers,
		},
	}
	status, err := json.Marshal(cp.Status)
	if err != nil {
		return nil, err
	}
	if len(status) > MaxCheckpointBytes {
		checkpointsIgnored.WithLabelValues(ckptTooLarge).Inc()
		return nil, fmt.Errorf("checkpoint of %d bytes is above %d: not written", len(status), MaxCheckpointBytes)
	}
	spec, err := json.Marshal(cp.Spec)
	if err != nil {
		return nil, err
	}
	// The owner too: a checkpoint left without it (`kubectl delete gfa --cascade=orphan`)
	// and found by an autoscaler of the same name is that one's from this write on
	// (restoreCheckpoint restores only its own; garbage collection deletes it with it).
	owners, err := json.Marshal(cp.OwnerReferences)
	if err != nil {
		return nil, err
	}
	patch := fmt.Sprintf(`[{"op":"add","path":"/metadata/ownerReferences","value":%s},{"op":"add","path":"/spec","value":%s},{"op":"add","path":"/status","value":%s}]`, owners, spec, status)
	replace := func() error {
		target := &gpufracv1.GPUFractionCheckpoint{ObjectMeta: metav1.ObjectMeta{Name: gfa.Name, Namespace: gfa.Namespace}}
		return r.Client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, []byte(patch)))
	}
	// One request where the object's existence is known: a patch after a write or a
	// restore of this process, else a create (a first install writes every workload's).
	_, known := r.checkpoints[w]
	return func() error {
		var err error
		if known {
			if err = replace(); apierrors.IsNotFound(err) {
				err = r.Client.Create(ctx, cp)
			}
		} else if err = r.Client.Create(ctx, cp); apierrors.IsAlreadyExists(err) {
			err = replace()
		}
		if err != nil {
			checkpointsIgnored.WithLabelValues(ckptWriteFailed).Inc()
			return fmt.Errorf("writing GPUFractionCheckpoint %s/%s: %w", gfa.Namespace, gfa.Name, err)
		}
		checkpointsWritten.Inc()
		return nil
	}, nil
}

// restoreCheckpoints lists the checkpoints, once per process, and restores each valid
// one into the model (restoreCheckpoint). It is called by the first cycle after its
// autoscalers were resolved and tracked, before anything is loaded. A failed list is
// logged and counted; every workload then bootstraps from Prometheus.
func (r *Recommender) restoreCheckpoints(ctx context.Context, c *cycle) {
	if !r.Config.Checkpoints || r.checkpointsRead {
		return
	}
	r.checkpointsRead = true
	inCharge := map[types.NamespacedName]*entry{}
	for _, e := range c.entries {
		if e.targetErr == nil && c.byRef[e.ref] == e {
			inCharge[types.NamespacedName{Namespace: e.gfa.Namespace, Name: e.gfa.Name}] = e
		}
	}
	reader := r.CheckpointReader
	if reader == nil {
		reader = r.Client
	}
	log := klog.FromContext(ctx)
	restored, ignored := 0, 0
	opts := []client.ListOption{client.Limit(checkpointListPage)}
	for {
		// Unstructured, so that one object that does not decode is ignored alone, not
		// the whole page.
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gpufracv1.GroupVersion.WithKind("GPUFractionCheckpointList"))
		if err := reader.List(ctx, list, opts...); err != nil {
			checkpointsIgnored.WithLabelValues(ckptListFailed).Inc()
			log.Error(err, "Listing checkpoints failed; every workload bootstraps from Prometheus")
			return
		}
		for i := range list.Items {
			if reason, err := r.restoreCheckpoint(c, inCharge, &list.Items[i]); reason != "" {
				ignored++
				checkpointsIgnored.WithLabelValues(reason).Inc()
				log.Info("Checkpoint ignored; the workload bootstraps from Prometheus", "checkpoint", klog.KObj(&list.Items[i]), "reason", reason, "err", err)
			} else if err == nil {
				restored++
			}
		}
		if list.GetContinue() == "" {
			break
		}
		opts = []client.ListOption{client.Limit(checkpointListPage), client.Continue(list.GetContinue())}
	}
	log.Info("Restored checkpoints", "restored", restored, "ignored", ignored, "tracked", len(r.tracked))
}

// restoreCheckpoint restores one checkpoint object into the model and returns "" and
// nil; or the reason it was ignored and why; or "" and errSkip for a checkpoint of no
// autoscaler this shard has in charge (another shard's, or one deleted that garbage
// collection will remove).
func (r *Recommender) restoreCheckpoint(c *cycle, inCharge map[types.NamespacedName]*entry, u *unstructured.Unstructured) (string, error) {
	var cp gpufracv1.GPUFractionCheckpoint
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cp); err != nil {
		return ckptDecode, err
	}
	e := inCharge[types.NamespacedName{Namespace: cp.Namespace, Name: cp.Spec.AutoscalerName}]
	if e == nil {
		return "", errSkip
	}
	if !slices.ContainsFunc(cp.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == e.gfa.UID }) {
		return ckptOtherAutoscaler, fmt.Errorf("not owned by autoscaler %s (uid %s)", e.gfa.Name, e.gfa.UID)
	}
	w := history.WorkloadKey(e.ref)
	if cp.Spec.WorkloadKind != w.Kind || cp.Spec.WorkloadName != w.Name {
		return ckptTargetChanged, fmt.Errorf("of %s %s, the autoscaler's target is %s %s", cp.Spec.WorkloadKind, cp.Spec.WorkloadName, w.Kind, w.Name)
	}
	if cp.Status.ModelVersion != gpufracv1.CheckpointModelVersion {
		return ckptVersion, fmt.Errorf("model version %q, this recommender's is %q", cp.Status.ModelVersion, gpufracv1.CheckpointModelVersion)
	}
	if want := r.model.Options().CheckpointOptions(); cp.Status.Options != want {
		return ckptOptions, fmt.Errorf("options %+v, this recommender's are %+v", cp.Status.Options, want)
	}
	// Another process' clock may run ahead of this one's: a checkpoint up to one
	// interval in the future is restored (the samples up to its time are in it, so they
	// are skipped), one further ahead is not trusted.
	until := cp.Status.SamplesUntil.Time
	if until.IsZero() || until.After(c.now.Add(r.Config.Interval)) || c.now.Sub(until) >= r.Config.HistoryLength {
		return ckptTooOld, fmt.Errorf("samples until %s: not within the history length %s before %s", until, r.Config.HistoryLength, c.now)
	}
	t := r.tracked[w]
	if t == nil || t.bootstrapped {
		return "", errSkip
	}
	if err := r.model.Restore(w, until, cp.Status.Containers); err != nil {
		return ckptDecode, err
	}
	t.fedTo = until
	if until.After(c.now) {
		t.fedTo = c.now
	}
	r.checkpoints[w] = checkpointMark{at: until, version: r.model.Version(w)}
	checkpointsRestored.Inc()
	return "", nil
}

// errSkip: a checkpoint of no workload this recommender restores (restoreCheckpoint).
var errSkip = fmt.Errorf("no autoscaler in charge of this shard")
