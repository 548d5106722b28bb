package recommender

import (
	"cmp"
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// History from recordings (Config.HistoryFromRecordings, --history-from-recordings): a
// history load reads each whole hour's memory peak and flatness from the gpufrac-history
// recording rules (metrics.HistoryRules), one recorded point per container and hour,
// instead of every raw sample through the robust expressions. The recordings are the
// reader's own queries per minute, so where they hold an hour whole the model gets the
// same values. Everything else stays on the raw series: hours the recordings do not hold
// whole (rules loaded later, a missed evaluation, recordings past their retention; read
// raw, never taken as no data), the load's first hour, the running interval, compute,
// the shared-device copies, the agent's contradictions and the diagnostic counts.

// recordedLoad is a history load's use of one source's recordings.
type recordedLoad struct {
	// phase is how far past each whole minute the rule group evaluates
	// (metrics.Reader.RecordingPhase): the hour ending at H is recorded at H + phase.
	phase time.Duration
	// start is the load's start; its first hour is read raw (readRecorded).
	start time.Time
	// compute: whole hours' compute is read from the recorded quantiles too
	// (Config.HistoryComputeFromRecordings, readCompute); false: compute is read raw.
	compute bool
}

// recordedLoads returns, for a history load of (from, to] with HistoryFromRecordings,
// the sources read this cycle whose recordings can stand for the raw reads, each with
// its phase learnt at to; nil otherwise (live loads, loads shorter than SplitMinWindow,
// labels or memory interval other than the recordings'). A source whose phase query
// fails or finds no recording is read raw, logged.
func (r *Recommender) recordedLoads(ctx context.Context, sel metrics.Selector, from, to time.Time, bootstrapped bool) map[string]*recordedLoad {
	if !r.Config.HistoryFromRecordings || bootstrapped || to.Sub(from) < SplitMinWindow {
		return nil
	}
	log := klog.FromContext(ctx)
	why := metrics.RecordingsUnusable(sel)
	if agg := r.model.Options().MemoryAggregationInterval; agg != metrics.HistoryPeakInterval {
		why = "--memory-aggregation-interval is " + agg.String() + ", the recordings' hour " + metrics.HistoryPeakInterval.String()
	}
	if why != "" {
		log.Info("History read from the raw series, not the recordings", "why", why)
		return nil
	}
	out := map[string]*recordedLoad{}
	for _, src := range r.order() {
		phase, ok, err := r.Reader.RecordingPhase(ctx, src, to)
		if err != nil || !ok {
			log.Info("No gpufrac-history recordings of the source; its history is read from the raw series", "source", src.Name(), "err", err)
			continue
		}
		log.V(2).Info("History read from the recordings", "source", src.Name(), "phase", phase)
		out[src.Name()] = &recordedLoad{phase: phase, start: from, compute: r.Config.HistoryComputeFromRecordings}
	}
	return out
}

// recordedMemory reads the source's hourly recordings: windows of
// metrics.HistoryPeakInterval ending at the recordings' evaluation times only.
type recordedMemory struct{ src metrics.Source }

func (q recordedMemory) peaks(sel metrics.Selector, _ time.Duration) string {
	return metrics.RecordedPeakQuery(q.src, sel)
}

func (q recordedMemory) flat(sel metrics.Selector, _ time.Duration) string {
	return metrics.RecordedFlatQuery(q.src, sel)
}

func (recordedMemory) samples() *metrics.SampleRead { return nil }

// readRecorded reads the memory of the whole hours ending at first … last (clock hours,
// first ≤ last) of one slice of a recorded load, stepping at the recordings' phase o:
// hour H is read over (H − 1h + o, H + o], from the recordings where they hold it whole
// (metrics.Reader.RecordedHours), else from the raw series at the same steps (robust only
// in the namespaces holding an impossible sample there); each sample is then restamped at
// H with a window of one hour, as the model takes it. The load's first hour is read raw
// over (H − 1h, H + o], so nothing between the load's start (or the reads before it,
// whatever their phase) and the first recorded hour is lost. It returns the first query
// error.
func (d *sourceData) readRecorded(ctx context.Context, rd *metrics.Reader, sel metrics.Selector, plan readPlan, rec *recordedLoad,
	first, last time.Time, contradict bool) error {
	agg, o := metrics.HistoryPeakInterval, rec.phase
	n := [3]int{len(d.memory), len(d.flat), len(d.contradicted)}
	raw := func(from, to time.Time) rawMemory {
		dirty, err := rd.DirtyNamespaces(ctx, sel, d.src.Fields(metrics.SignalMemory), from, to)
		if err != nil {
			klog.FromContext(ctx).V(2).Info("Finding namespaces with impossible samples failed; reading them all with the robust queries",
				"signal", metrics.SignalMemory, "source", d.src.Name(), "err", err)
		}
		return rawMemory{src: d.src, dirty: dirty}
	}
	if !first.Add(-agg).After(rec.start) {
		if err := d.readMemory(ctx, rd, sel, plan, raw(first.Add(-agg), first.Add(o)), agg+o, first.Add(o), first.Add(o), contradict); err != nil {
			return err
		}
		first = first.Add(agg)
	}
	if !last.Before(first) {
		whole, err := rd.RecordedHours(ctx, d.src, first.Add(o), last.Add(o))
		if err != nil {
			return err
		}
		// Runs of consecutive hours read the same way, in time order.
		for a := first; !a.After(last); {
			recorded, b := whole[a.Add(o).UnixMilli()], a
			for b.Add(agg).Compare(last) <= 0 && whole[b.Add(agg+o).UnixMilli()] == recorded {
				b = b.Add(agg)
			}
			var mq memoryQueries = recordedMemory{d.src}
			if !recorded {
				mq = raw(a.Add(o-agg), b.Add(o))
			}
			if err := d.readMemory(ctx, rd, sel, plan, mq, agg, a.Add(o), b.Add(o), contradict); err != nil {
				return err
			}
			a = b.Add(agg)
		}
	}
	d.memory = append(d.memory[:n[0]], restamped(d.memory[n[0]:], -o, agg)...)
	d.flat = append(d.flat[:n[1]], restamped(d.flat[n[1]:], -o, agg)...)
	d.contradicted = append(d.contradicted[:n[2]], restamped(d.contradicted[n[2]:], -o, agg)...)
	return nil
}

// restamped returns the series of containers read in several runs as one series per
// container (as one range read returns them; a load's slices are sized by that count),
// in the order they first appear, each sample moved by shift, with the given window.
func restamped(series []metrics.Series, shift, window time.Duration) []metrics.Series {
	var out []metrics.Series
	at := map[metrics.ContainerID]int{}
	for _, s := range series {
		i, ok := at[s.ID]
		if !ok {
			at[s.ID] = len(out)
			s.Samples = append([]metrics.Sample(nil), s.Samples...)
			s.DeviceLoad = append([]metrics.DeviceLoad(nil), s.DeviceLoad...)
			if s.Sources != nil {
				s.Sources = append([]string(nil), s.Sources...)
			}
			out = append(out, s)
			continue
		}
		m := &out[i]
		if m.Sources != nil || s.Sources != nil || m.Source != s.Source {
			m.Sources = append(m.SampleSources(), s.SampleSources()...) // runs of several fields
		}
		m.Samples = append(m.Samples, s.Samples...)
		m.DeviceLoad = append(m.DeviceLoad, s.DeviceLoad...)
		m.SharedSamples += s.SharedSamples
		m.Devices = max(m.Devices, s.Devices)
		if s.MultiDeviceAt.After(m.MultiDeviceAt) {
			m.MultiDeviceAt = s.MultiDeviceAt
		}
		m.Source, m.MIGProfile = cmp.Or(s.Source, m.Source), cmp.Or(s.MIGProfile, m.MIGProfile)
		m.WrongDevice = cmp.Or(m.WrongDevice, s.WrongDevice)
	}
	for i := range out {
		out[i].Window = window
		if !out[i].MultiDeviceAt.IsZero() {
			out[i].MultiDeviceAt = out[i].MultiDeviceAt.Add(shift)
		}
		for j := range out[i].Samples {
			out[i].Samples[j].Time = out[i].Samples[j].Time.Add(shift)
		}
		for j := range out[i].DeviceLoad {
			out[i].DeviceLoad[j].Time = out[i].DeviceLoad[j].Time.Add(shift)
		}
	}
	return out
}

// readCompute reads the compute points cpu of one slice of a load (computePoints) at
// the cycle interval step: from the raw series (metrics.Source.ComputeQuery, with the
// copies companion where the plan says copies are possible; from raw samples,
// metrics.Reader.RangeFromSamples, where the plan says so, and the range query where
// the backend refuses those as too large), or, with rec reading
// compute (recordedLoad.compute), where no
// device held several pods (plan.copies false) and step is the recordings' minute, each
// whole hour that lies inside the slice's points and that the recordings hold whole
// (metrics.Reader.RecordedHours) from its recorded quantiles (metrics.Reader.RecordedCompute:
// the hour's minute means stood for by its quantiles), the rest raw. A raw point whose
// window overlaps a recorded hour is not read: the raw grid ends at the load's end, the
// recorded minutes at the recordings' phase, so up to one minute at each end of a run
// of recorded hours is read by neither. Every series has its compute in time order, one
// series per container and source field as one range read returns them. It returns the
// first query error.
func (d *sourceData) readCompute(ctx context.Context, rd *metrics.Reader, sel metrics.Selector, plan readPlan, rec *recordedLoad,
	cpu computeSpan, step time.Duration) error {
	raw := func(first, last time.Time) ([]metrics.Series, error) {
		query := func() ([]metrics.Series, error) {
			// With raw samples refused (cpuDirty nil): every namespace robust.
			q := metrics.SplitQuery(sel, plan.cpuDirty, func(s metrics.Selector) string { return d.src.ComputeQuery(s, step) })
			return rd.RangeShared(ctx, metrics.SignalCompute, q, plan.copiesQuery(d.src, sel, metrics.SignalCompute, step), first, last, step)
		}
		if plan.cpuSamples == nil {
			return query()
		}
		return rd.RangeFromSamplesOr(ctx, metrics.SignalCompute, *plan.cpuSamples, first, last, step, query)
	}
	if rec == nil || !rec.compute || plan.copies || step != metrics.HistoryRuleInterval {
		s, err := raw(cpu.first, cpu.last)
		d.compute = withWindow(s, step)
		return err
	}
	hour, o := metrics.HistoryPeakInterval, rec.phase
	// Hours H whose recorded minutes (H + o − 1h, H + o] lie within the points' windows.
	h0 := cpu.first.Add(-step - o).Add(hour - 1).Truncate(hour).Add(hour)
	h1 := cpu.last.Add(-o).Truncate(hour)
	whole := map[int64]bool{}
	if !h1.Before(h0) {
		var err error
		if whole, err = rd.RecordedHours(ctx, d.src, h0.Add(o), h1.Add(o)); err != nil {
			return err
		}
	}
	var all []metrics.Series
	next := cpu.first // the first raw point not read yet
	for h := h0; !h.After(h1); {
		if !whole[h.Add(o).UnixMilli()] {
			h = h.Add(hour)
			continue
		}
		last := h
		for last.Add(hour).Compare(h1) <= 0 && whole[last.Add(hour+o).UnixMilli()] {
			last = last.Add(hour)
		}
		start, end := h.Add(o-hour), last.Add(o) // the run's minutes: (start, end]
		// Raw points up to the run: each window ends at or before start.
		if k := start.Sub(next); k >= 0 {
			upTo := next.Add(k / step * step)
			s, err := raw(next, upTo)
			if err != nil {
				return err
			}
			all = append(all, s...)
		}
		s, err := rd.RecordedCompute(ctx, d.src, sel, h.Add(o), end)
		if err != nil {
			return err
		}
		all = append(all, s...)
		d.recordedUntil = end
		// The first raw point after the run: its window starts at or after end.
		if k := end.Add(step).Sub(next); k > 0 {
			next = next.Add((k + step - 1) / step * step)
		}
		h = last.Add(hour)
	}
	if !next.After(cpu.last) {
		s, err := raw(next, cpu.last)
		if err != nil {
			return err
		}
		all = append(all, s...)
	}
	d.compute = restamped(all, 0, step)
	return nil
}
