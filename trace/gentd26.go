package trace

import (
	"cmp"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// File names of the Alibaba GenTD26 trace (cluster-trace-v2026-GenAI) that
// ReadGenTD26 reads.
const (
	// GenTD26MemoryFile holds GPU memory used per pod, bytes
	// (columns timestamp_anon, value, container_ip).
	GenTD26MemoryFile = "pod_gpu_memory_used_bytes_anon.csv"
	// GenTD26DutyCycleFile holds GPU duty cycle per pod, percent 0–100
	// (columns value, timestamp_anon, container_ip).
	GenTD26DutyCycleFile = "pod_gpu_duty_cycle_anon.csv"
	// GenTD26LatencyFile holds per-request model inference latency, milliseconds
	// (columns timestamp_anon, value, container_ip). It is optional.
	GenTD26LatencyFile = "model_predict_data_anon.csv"
)

// GenTD26PublishedEnd is the end of the published GenTD26 trace: its last timestamp_anon,
// 1662940800 (Unix seconds). Readers that pass it as GenTD26Options.End keep the
// published times, so a replay does not depend on the day it runs (resize windows and
// hourly aggregation intervals see the same times).
var GenTD26PublishedEnd = time.Unix(1662940800, 0).UTC()

// GenTD26Options configures ReadGenTD26. The zero value reads the whole trace as one
// single-replica Deployment per trace pod in namespace "gentd26", ending now.
type GenTD26Options struct {
	// MaxPods limits the number of trace pods (0: all). Pods are taken in order of
	// container_ip after the Duration window is applied, so the choice is stable.
	MaxPods int
	// Duration keeps only the last Duration of the trace, samples with times in
	// (end − Duration, end] where end is the last memory or duty-cycle sample of
	// any pod (0: the whole trace).
	Duration time.Duration
	// PodsPerDeployment groups this many consecutive trace pods (in container_ip
	// order) into one Deployment (0 or 1: one single-replica Deployment per pod).
	PodsPerDeployment int
	// Namespace of all pods (default "gentd26").
	Namespace string
	// Container is the container name of all pods (default "inference").
	Container string
	// DeploymentPrefix names Deployments "<prefix>-000", "<prefix>-001", ...
	// (default "sd", for Stable Diffusion).
	DeploymentPrefix string
	// End is where the trace is moved to end: all times are shifted by a whole
	// number of seconds so the last memory or duty-cycle sample lies at End
	// truncated to the second (zero: time.Now()).
	End time.Time
}

func (o *GenTD26Options) defaults() {
	o.Namespace = cmp.Or(o.Namespace, "gentd26")
	o.Container = cmp.Or(o.Container, "inference")
	o.DeploymentPrefix = cmp.Or(o.DeploymentPrefix, "sd")
	if o.PodsPerDeployment < 1 {
		o.PodsPerDeployment = 1
	}
	if o.End.IsZero() {
		o.End = time.Now()
	}
}

// ReadGenTD26 reads the Alibaba GenTD26 trace from dir: GPU memory (bytes, kept as
// is), GPU duty cycle (percent, divided by 100 into Pod.Compute) and, when
// GenTD26LatencyFile exists, per-request latency (milliseconds) aggregated into a
// per-minute nearest-rank p95 in seconds (Pod.LatencyP95; a point at minute
// boundary T covers requests with timestamps in [T-1m, T) of the original trace).
//
// Columns are found by header name. A trace pod is one container_ip (the
// publishers' MD5 hash of the pod), kept in Pod.ID; its names follow the
// Deployment convention (see GenTD26Options, TemplateHash, PodSuffix): the
// pod-template-hash comes from the container_ips of the Deployment's pods and the
// suffix from the pod's container_ip.
//
// Bad input is an *InputError naming file and line: a missing column, an empty
// container_ip, a value or timestamp that is not a finite number, a negative value,
// or two different memory or duty-cycle values of one pod at one time. Unsorted
// rows are sorted, exact duplicates dropped, duty cycle above 100 % and memory above
// MaxMemoryBytes skipped; Stats counts each. A namespace, container or Deployment prefix
// the API server would refuse as a name is an error before any file is read.
func ReadGenTD26(dir string, opts GenTD26Options) (Trace, Stats, error) {
	if err := validateNames(opts.Namespace, opts.Container, opts.DeploymentPrefix, "--deployment-prefix"); err != nil {
		return Trace{}, Stats{}, err
	}
	opts.defaults()
	var st Stats
	st.Memory.File = GenTD26MemoryFile
	st.Compute.File = GenTD26DutyCycleFile
	st.Latency.File = GenTD26LatencyFile

	g, err := readGenTD26Series(dir, &st)
	if err != nil {
		return Trace{}, st, err
	}
	if err := g.finish(&st); err != nil {
		return Trace{}, st, err
	}
	// The trace ends at the last memory or duty-cycle sample.
	endMs := g.endMs()
	if endMs == math.MinInt64 {
		return Trace{}, st, inputErr(GenTD26MemoryFile, 1, "no memory or duty-cycle samples in %s", dir)
	}
	if opts.Duration > 0 {
		g.trim(endMs-opts.Duration.Milliseconds(), &st)
	}
	ips := g.pods(opts.MaxPods, &st)
	shiftMs := opts.End.Truncate(time.Second).UnixMilli() - endMs
	shiftMs -= shiftMs % 1000 // whole seconds, so second-aligned input stays aligned
	return g.trace(ips, opts, shiftMs, &st), st, nil
}

// genTD26Series are the raw series of the three GenTD26 files, by container_ip.
type genTD26Series struct {
	mem, duty, lat map[string]*rawSeries
}

// readGenTD26Series reads the memory, duty-cycle and latency files of dir, counting in
// st. A missing latency file is no latency (st.Latency.Missing); a missing memory or
// duty-cycle file, or any bad row, is an error.
func readGenTD26Series(dir string, st *Stats) (genTD26Series, error) {
	var g genTD26Series
	var err error
	if g.mem, err = readGenTD26File(dir, GenTD26MemoryFile, MaxMemoryBytes, memoryRule, &st.Memory); err != nil {
		return g, err
	}
	if g.duty, err = readGenTD26File(dir, GenTD26DutyCycleFile, 100, "above 100: the duty cycle is a percent 0–100", &st.Compute); err != nil {
		return g, err
	}
	g.lat, err = readGenTD26File(dir, GenTD26LatencyFile, math.Inf(1), "", &st.Latency)
	if errors.Is(err, fs.ErrNotExist) {
		st.Latency.Missing = true
		g.lat, err = map[string]*rawSeries{}, nil
	}
	return g, err
}

// finish sorts and deduplicates every series (latency may repeat a timestamp).
func (g genTD26Series) finish(st *Stats) error {
	for _, f := range []struct {
		m             map[string]*rawSeries
		file          string
		allowSameTime bool
		s             *SignalStats
	}{
		{g.mem, GenTD26MemoryFile, false, &st.Memory},
		{g.duty, GenTD26DutyCycleFile, false, &st.Compute},
		{g.lat, GenTD26LatencyFile, true, &st.Latency},
	} {
		for ip, rs := range f.m {
			if _, err := rs.finish(f.file, ip, f.allowSameTime, f.s); err != nil {
				return err
			}
		}
	}
	return nil
}

// endMs returns the time of the last memory or duty-cycle sample, Unix milliseconds, or
// math.MinInt64 when there is none.
func (g genTD26Series) endMs() int64 {
	endMs := int64(math.MinInt64)
	for _, m := range []map[string]*rawSeries{g.mem, g.duty} {
		for _, rs := range m {
			if n := len(rs.pts); n > 0 && rs.pts[n-1].ms > endMs {
				endMs = rs.pts[n-1].ms
			}
		}
	}
	return endMs
}

// trim drops the samples at or before fromMs (the Duration window), counting them in
// st's Trimmed.
func (g genTD26Series) trim(fromMs int64, st *Stats) {
	for _, t := range []struct {
		m map[string]*rawSeries
		s *SignalStats
	}{{g.mem, &st.Memory}, {g.duty, &st.Compute}, {g.lat, &st.Latency}} {
		for _, rs := range t.m {
			i := sort.Search(len(rs.pts), func(i int) bool { return rs.pts[i].ms > fromMs })
			t.s.Trimmed += i
			rs.pts = rs.pts[i:]
		}
	}
}

// pods returns the trace's pods: every container_ip with memory or duty-cycle samples,
// sorted, the first maxPods when maxPods > 0 (the samples of the others counted as
// trimmed). Latency samples of no such pod count as orphans.
func (g genTD26Series) pods(maxPods int, st *Stats) []string {
	var ips []string
	for _, m := range []map[string]*rawSeries{g.mem, g.duty} {
		for ip, rs := range m {
			if len(rs.pts) > 0 {
				ips = append(ips, ip)
			}
		}
	}
	sort.Strings(ips)
	ips = uniqueSorted(ips)
	if maxPods > 0 && len(ips) > maxPods {
		for _, ip := range ips[maxPods:] {
			st.Memory.Trimmed += lenPts(g.mem[ip])
			st.Compute.Trimmed += lenPts(g.duty[ip])
			st.Latency.Trimmed += lenPts(g.lat[ip])
			delete(g.lat, ip)
		}
		ips = ips[:maxPods]
	}
	inTrace := map[string]bool{}
	for _, ip := range ips {
		inTrace[ip] = true
	}
	for ip, rs := range g.lat {
		if !inTrace[ip] {
			st.Latency.Orphans += len(rs.pts)
		}
	}
	return ips
}

// trace groups the pods ips into Deployments of opts.PodsPerDeployment, in order, and
// returns their samples shifted by shiftMs (memory in bytes, duty cycle as a ratio,
// latency as per-minute p95), counting kept samples in st.
func (g genTD26Series) trace(ips []string, opts GenTD26Options, shiftMs int64, st *Stats) Trace {
	var tr Trace
	for d := 0; d*opts.PodsPerDeployment < len(ips); d++ {
		group := ips[d*opts.PodsPerDeployment : min((d+1)*opts.PodsPerDeployment, len(ips))]
		deploy := deploymentName(opts.DeploymentPrefix, d)
		rs, names := namePods(deploy, strings.Join(group, ","), group)
		for i, ip := range group {
			p := Pod{
				Namespace:  opts.Namespace,
				Workload:   deploy,
				ReplicaSet: rs,
				Pod:        names[i],
				Container:  opts.Container,
				ID:         ip,
			}
			if s := g.mem[ip]; s != nil {
				p.Memory = toPoints(s.pts, shiftMs, 1)
				st.Memory.Kept += len(s.pts)
			}
			if s := g.duty[ip]; s != nil {
				p.Compute = toPoints(s.pts, shiftMs, 100)
				st.Compute.Kept += len(s.pts)
			}
			if s := g.lat[ip]; s != nil {
				p.LatencyP95 = minuteP95(s.pts, shiftMs)
				st.Latency.Kept += len(s.pts)
			}
			st.Memory.Samples += len(p.Memory)
			st.Compute.Samples += len(p.Compute)
			st.Latency.Samples += len(p.LatencyP95)
			tr.Pods = append(tr.Pods, p)
		}
	}
	return tr
}

func lenPts(rs *rawSeries) int {
	if rs == nil {
		return 0
	}
	return len(rs.pts)
}

func uniqueSorted(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// readGenTD26File reads one GenTD26 file (columns timestamp_anon, value,
// container_ip in any order) into raw series per container_ip. Values above max
// are skipped and counted as OutOfRange, the first with rule.
func readGenTD26File(dir, name string, max float64, rule string, st *SignalStats) (map[string]*rawSeries, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := newCSVTable(f, name, "timestamp_anon", "value", "container_ip")
	if err != nil {
		return nil, err
	}
	out := map[string]*rawSeries{}
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			return out, nil
		}
		st.Values++
		ip := t.get("container_ip")
		if ip == "" {
			return nil, t.errf("empty container_ip")
		}
		ms, err := t.unixSeconds("timestamp_anon")
		if err != nil {
			return nil, err
		}
		v, err := t.number("value")
		if err != nil {
			return nil, err
		}
		if v > max {
			st.outOfRange(name, t.line, "value", v, rule)
			continue
		}
		rs := out[ip]
		if rs == nil {
			rs = &rawSeries{}
			out[ip] = rs
		}
		rs.add(rawPoint{ms: ms, v: v, line: t.line}, st)
	}
}

// minuteP95 aggregates per-request latencies (milliseconds, sorted by time) into
// one point per minute of the original trace: the nearest-rank 95th percentile of
// the requests in [m, m+1min), in seconds, stamped at m+1min shifted by shiftMs.
func minuteP95(pts []rawPoint, shiftMs int64) []Point {
	var out []Point
	var vals []float64
	flush := func(minute int64) {
		if len(vals) == 0 {
			return
		}
		sort.Float64s(vals)
		rank := int(math.Ceil(0.95*float64(len(vals)))) - 1
		out = append(out, Point{T: time.UnixMilli((minute+1)*60000 + shiftMs).UTC(), V: vals[rank] / 1000})
		vals = vals[:0]
	}
	cur := int64(math.MinInt64)
	for _, p := range pts {
		m := floorDiv(p.ms, 60000)
		if m != cur {
			flush(cur)
			cur = m
		}
		vals = append(vals, p.v)
	}
	flush(cur)
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
