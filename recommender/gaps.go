package recommender

import (
	"slices"
	"time"

	"github.com/gpufrac/gpufrac/recommender/metrics"
)

// GapCheck is the recommender's check, cycle by cycle, for an exporter or scrape gap of
// one workload: running pods that report no GPU sample. It is the one code of the rule:
// the live recommender feeds it what its Prometheus loads read (dataGap), and gpufrac
// simulate what its replayed trace holds, so the simulator holds the same cycles as
// the product. It knows nothing of Kubernetes: each cycle is given as a GapCycle.
//
// A workload gap is raised (GapFinding.Raised) when the workload has live pods and for
// Needed cycles in a row no sample was kept. Needed (EmptyCyclesFor) is 3 cycles of
// GapCycle.Interval, or, where longer, as many cycles as span 3 times the longer of the
// workload's typical compute sample spacing (the median of its last 31, per pod) and
// the typical time between arrivals (GapCycle.Arrivals), that spacing counted at most
// 5 minutes (MaxScrapeSpacing). No sample is no compute sample once compute was seen
// (else no sample at all), or, once memory was seen, no memory sample while compute is
// read (unless the memory was set aside as a stale series). A cycle whose samples were
// dropped as impossible or set aside (GapCycle.SetAside) is not empty.
//
// A pod gap is raised (GapFinding.Silent) for a running pod without a compute sample
// for Needed cycles in a row, where it had compute samples in an earlier cycle, or never
// had any while the workload's compute was read (this cycle or earlier) and it has run
// for metrics.AgentCoverage (5 minutes: time for a new pod's first scrape) or longer.
// A running pod whose compute samples are read but that has no memory sample
// (GapPod.Memory, none set aside: GapPod.MemorySetAside) in Needed cycles in a row in
// which the workload's memory is read (another pod's) is found silent too
// (GapFinding.SilentMemory): coverage is per pod and per signal. A running GPU process
// always holds memory, so its pod's memory series were lost (one node's exporter
// without the memory field, a relabeling that drops it on one scrape job), and the
// workload's memory target, made from its siblings alone, would let the updater shrink
// it below what it uses.
//
// A pod that is not running, or a new pod of the same name (GapPod.Created), starts
// again.
//
// Once raised, a gap is ended by samples (or the pod stopping), never by a wait that
// grew meanwhile (a spacing of samples or arrivals learnt late).
//
// The zero GapCheck is ready to use; it is not safe for concurrent use.
type GapCheck struct {
	// empty: consecutive cycles with live pods and no sample (Needed ends the wait);
	// raised: the workload's gap was raised and no sample came since.
	empty  int
	raised bool
	// seenCompute: compute samples were kept once; from then on a cycle without any is
	// a gap (memory is re-read over the running interval, so it cannot show one).
	// seenMemory: memory samples were kept once; from then on a cycle without any while
	// compute is read is a gap too (a running GPU process always holds memory, so the
	// memory series were lost).
	seenCompute, seenMemory bool
	// pods: the per-pod state, by pod name.
	pods map[string]*podGapState
	// spacing: how far apart the workload's compute samples are (Samples).
	spacing sampleSpacing
}

// podGapState is one pod's state in a GapCheck.
type podGapState struct {
	// seen: the pod had compute samples in an earlier cycle while running, as the pod
	// created at created (another is a new pod of the name).
	seen    bool
	created time.Time
	// counting: the pod counts cycles without compute samples, empty of them in a row;
	// gap: it was found silent and stays so until it reports or stops running.
	counting bool
	empty    int
	gap      bool
	// memEmpty: cycles in a row (of those that read the workload's memory) in which the
	// pod reported compute and no memory; memGap: it was found silent for memory and
	// stays so until its memory is read or it stops running.
	memEmpty int
	memGap   bool
}

// GapPod is one live (not finished) pod of a workload in one cycle.
type GapPod struct {
	Name string
	// Running: the pod runs with every container running (not pending, restarting,
	// being deleted).
	Running bool
	// Created tells the pod from an earlier pod of its name (a replaced StatefulSet
	// replica): its creation time.
	Created time.Time
	// RunningFor is how long every container has run at the cycle's time.
	RunningFor time.Duration
	// Compute and Memory are how many compute and memory samples of the pod were kept
	// this cycle.
	Compute, Memory int
	// MemorySetAside: the pod's memory samples of this cycle were set aside (a stale
	// series, 0 read while busy, samples naming another GPU or without a single GPU
	// container): another finding names it, so no memory sample is no gap of its own.
	MemorySetAside bool
}

// GapCycle is what one cycle's loads read of a workload.
type GapCycle struct {
	// Pods are the workload's live (not finished) pods.
	Pods []GapPod
	// Compute and Memory are how many compute and memory samples of the workload were
	// kept this cycle (of any pod, ended ones included).
	Compute, Memory int
	// StaleMemory: some pod's memory series were set aside as stale
	// (metrics.StaleMemory): no memory sample is then no gap.
	StaleMemory bool
	// SetAside: samples were dropped as impossible or set aside (pod-level usage with no
	// single GPU container, series naming the wrong GPU): samples came, so the cycle is
	// not empty.
	SetAside bool
	// Outranked: another finding is reported for the workload this cycle (every sample
	// of a signal impossible, a scrape target down): the workload's gap is neither raised
	// nor ended this cycle (the empty cycles are still counted), and GapFinding.Raised
	// is the last cycle's.
	Outranked bool
	// Interval is the recommender's --interval; Arrivals the typical time between
	// arrivals of new samples in Prometheus (Recommender.arrivals; 0: unknown).
	Interval, Arrivals time.Duration
}

// GapFinding is a GapCheck's answer for one cycle.
type GapFinding struct {
	// Needed is the wait, in cycles (EmptyCyclesFor).
	Needed int
	// Empty is how many cycles in a row the workload had live pods and no sample.
	Empty int
	// Raised: the workload's gap is raised (Empty reached Needed, no sample since).
	// MemoryOnly: what is missing is memory alone (compute samples are read).
	Raised, MemoryOnly bool
	// Silent are the running pods found silent, sorted; SilentMemory those of them
	// whose compute samples are read and whose memory samples are missing, sorted.
	Silent, SilentMemory []string
}

// Samples records the spacing of pod's compute samples kept this cycle, in time order
// (sampleSpacing.add; samples up to recordedUntil, zero: none, stand for recorded hours).
// Call it before the cycle's Cycle.
func (g *GapCheck) Samples(pod string, samples []metrics.Sample, recordedUntil time.Time) {
	g.spacing.add(pod, samples, recordedUntil)
}

// Cycle counts one cycle and returns its finding. Call it once per cycle.
func (g *GapCheck) Cycle(c GapCycle) GapFinding {
	f := GapFinding{Needed: EmptyCyclesFor(max(g.spacing.typical(), c.Arrivals), c.Interval)}
	f.Silent, f.SilentMemory = g.silentPods(c, f.Needed)
	g.seenCompute = g.seenCompute || c.Compute > 0
	g.seenMemory = g.seenMemory || c.Memory > 0
	none := c.Compute == 0 && (g.seenCompute || c.Memory == 0)
	if !none && g.seenMemory && c.Memory == 0 && !c.StaleMemory {
		none, f.MemoryOnly = true, true
	}
	if len(c.Pods) > 0 && none && !c.SetAside {
		g.empty++
	} else {
		g.empty = 0
	}
	if !c.Outranked {
		g.raised = g.empty > 0 && (g.raised || g.empty >= f.Needed)
	}
	f.Empty, f.Raised = g.empty, g.raised
	return f
}

// silentPods counts the cycle of each pod and returns, sorted, the running pods found
// silent (GapCheck's pod gap), and those of them silent for memory alone.
func (g *GapCheck) silentPods(c GapCycle, needed int) (silent, memory []string) {
	if g.pods == nil {
		g.pods = map[string]*podGapState{}
	}
	live := make(map[string]int, len(c.Pods))
	for i := range c.Pods {
		live[c.Pods[i].Name] = i
	}
	for name, st := range g.pods {
		i, ok := live[name]
		if st.seen && (!ok || !c.Pods[i].Running || !c.Pods[i].Created.Equal(st.created)) {
			st.seen = false
		}
		if !ok {
			st.counting, st.empty, st.gap = false, 0, false
			st.memEmpty, st.memGap = 0, false
		}
		if !st.seen && !st.counting && st.memEmpty == 0 {
			delete(g.pods, name)
		}
	}
	g.spacing.forget(func(pod string) bool { _, ok := live[pod]; return ok })
	// The others report: the workload's compute was read, this cycle or an earlier one.
	// Not only this cycle: with a scrape slower than --interval, or a cycle without a
	// whole window held (Recommender.dataEnd), most cycles read no compute of any pod,
	// and a pod that never reports was forgotten at each of them, so never counted.
	others := c.Compute > 0 || g.seenCompute
	for i := range c.Pods {
		p := &c.Pods[i]
		st := g.pods[p.Name]
		if st == nil {
			st = &podGapState{}
			g.pods[p.Name] = st
		}
		switch {
		case !p.Running || p.Compute > 0, !st.seen && (!others || p.RunningFor < metrics.AgentCoverage):
			st.counting, st.empty, st.gap = false, 0, false
		default:
			st.counting = true
			if st.empty++; st.empty >= needed || st.gap {
				silent = append(silent, p.Name)
				st.gap = true
			}
		}
		if p.Running && p.Compute > 0 {
			st.seen, st.created = true, p.Created
		}
		// Memory, per pod: counted only in cycles that read the workload's memory (a
		// cycle that reads none is the workload's memory gap, above) and in which the
		// pod's compute is read (a pod silent for both is the compute rule's).
		switch {
		case !p.Running || p.Memory > 0 || p.MemorySetAside:
			st.memEmpty, st.memGap = 0, false
		case p.Compute > 0 && c.Memory > 0:
			st.memEmpty++
		}
		if st.memEmpty >= needed || st.memGap {
			st.memGap = true
			if !st.gap {
				silent = append(silent, p.Name)
				memory = append(memory, p.Name)
			}
		}
		if !st.seen && !st.counting && st.memEmpty == 0 {
			delete(g.pods, p.Name)
		}
	}
	slices.Sort(silent)
	slices.Sort(memory)
	return silent, memory
}

// MaxScrapeSpacing bounds the sample spacing a GapCheck waits on: Prometheus' default
// lookback delta (metrics.AgentCoverage, 5 min). A series scraped less often than that
// is already absent from Prometheus' own instant queries between scrapes.
const MaxScrapeSpacing = metrics.AgentCoverage

// EmptyCyclesFor is how many consecutive cycles of interval (the recommender's
// --interval) without samples make a gap where a workload's samples come every apart
// (0: unknown): EmptyCyclesWhileRunning, or EmptyCyclesWhileRunning of every (at most
// MaxScrapeSpacing) where that is longer. A scrape interval longer than --interval (2
// or 5 minutes, a federated or remote-written Prometheus) leaves most cycles empty by
// design: counting those as a gap raised MetricsUnavailable every few cycles and
// cleared it at the next scrape. So do samples that reach Prometheus in batches
// (remote write, federation every few minutes): the cycles between two batches hold no
// whole window and read no compute (Recommender.dataEnd), whatever the scrape interval.
func EmptyCyclesFor(every, interval time.Duration) int {
	n := EmptyCyclesWhileRunning
	every = min(every, MaxScrapeSpacing)
	if interval > 0 && every > interval {
		n = max(n, int((time.Duration(EmptyCyclesWhileRunning)*every+interval-1)/interval))
	}
	return n
}

// sampleSpacing learns how far apart a workload's compute samples are: the time between
// consecutive samples of each of its pods, the last spacingKept of them kept.
type sampleSpacing struct {
	last  map[string]time.Time // newest sample fed, per pod
	gaps  []time.Duration      // ring of the last spacingKept spacings
	next  int                  // where the ring writes next
	count int                  // spacings written, up to spacingKept
}

// spacingKept is how many spacings sampleSpacing keeps: half an hour of per-minute
// samples, so that an outage (one long spacing) never sets the median.
const spacingKept = 31

// add records the spacings of pod's samples, in time order, after its newest sample fed.
// Samples up to recordedUntil (zero: none) stand for recorded hours
// (sourceData.recordedUntil): an hour's minute means stamped a minute apart whatever the
// scrape, so the spacings between them say nothing of it. For those, one spacing is
// recorded: an hour over the most samples any hour up to recordedUntil holds (the
// hours (recordedUntil − (k+1)h, recordedUntil − kh], as recorded), e.g. 5 minutes
// for 12 minute means an hour.
func (s *sampleSpacing) add(pod string, samples []metrics.Sample, recordedUntil time.Time) {
	if s.last == nil {
		s.last, s.gaps = map[string]time.Time{}, make([]time.Duration, spacingKept)
	}
	if !recordedUntil.IsZero() {
		perHour, most := map[int64]int{}, 0
		for _, p := range samples {
			if !p.Time.After(recordedUntil) {
				k := int64(recordedUntil.Sub(p.Time) / metrics.HistoryPeakInterval)
				perHour[k]++
				most = max(most, perHour[k])
			}
		}
		if most > 0 {
			s.record(metrics.HistoryPeakInterval / time.Duration(most))
		}
	}
	last, ok := s.last[pod]
	for _, p := range samples {
		if ok && p.Time.After(last) && last.After(recordedUntil) {
			s.record(p.Time.Sub(last))
		}
		if !ok || p.Time.After(last) {
			last, ok = p.Time, true
		}
	}
	if ok {
		s.last[pod] = last
	}
}

// record keeps one spacing, in place of the oldest once spacingKept are kept.
func (s *sampleSpacing) record(d time.Duration) {
	s.gaps[s.next] = d
	s.next = (s.next + 1) % spacingKept
	s.count = min(s.count+1, spacingKept)
}

// forget drops the newest sample of every pod that is not live, so that pods that ended
// (a Job's, a rollout's) are not kept for the life of the process.
func (s *sampleSpacing) forget(live func(pod string) bool) {
	for pod := range s.last {
		if !live(pod) {
			delete(s.last, pod)
		}
	}
}

// typical is the median spacing recorded, 0 before any.
func (s *sampleSpacing) typical() time.Duration {
	if s.count == 0 {
		return 0
	}
	g := slices.Clone(s.gaps[:s.count])
	slices.Sort(g)
	return g[len(g)/2]
}
