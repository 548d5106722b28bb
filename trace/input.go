package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// MaxMemoryBytes is the largest GPU memory value readers accept, 2^47 bytes
// (128 TiB, far above any GPU). Larger values are DCGM "blank" sentinels
// (DCGM_FP64_BLANK = 2^47, DCGM_INT64_BLANK ≈ 9.2e18) or corrupt; readers skip them
// and count them in SignalStats.OutOfRange.
const MaxMemoryBytes = 1 << 47

// memoryRule is why a memory value above MaxMemoryBytes is skipped.
const memoryRule = "above 2^47 bytes (128 TiB): a DCGM blank sentinel or corrupt"

// InputError reports bad input: the file (as named by the caller), the 1-based line
// (the header is line 1) and what is wrong. Error() renders "file:line: msg".
type InputError struct {
	File string
	Line int
	Msg  string
}

// Error renders "file:line: msg".
func (e *InputError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

func inputErr(file string, line int, format string, args ...any) error {
	return &InputError{File: file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Stats reports what a reader did with its input, one SignalStats per signal.
type Stats struct {
	Memory, Compute, Latency SignalStats
}

// SignalStats counts the values of one signal in a reader's input. For every signal
// Values = Kept + Duplicates + OutOfRange + Trimmed + Orphans.
type SignalStats struct {
	// File is the input file the values came from.
	File string
	// Missing is true when an optional input (GenTD26 model_predict_data_anon.csv)
	// was absent; the signal is then empty.
	Missing bool
	// Values is the number of values read (data rows, or non-empty cells in a long CSV).
	Values int
	// Kept is the number of values that went into the trace.
	Kept int
	// Samples is the number of points of this signal in the returned trace. It equals
	// Kept except for GenTD26 latency, where per-request values are aggregated to
	// per-minute p95 points.
	Samples int
	// Duplicates counts exact duplicates (same pod, timestamp and value) dropped.
	Duplicates int
	// OutOfRange counts values skipped as impossible: duty cycle above 100 percent,
	// compute ratio above 1, memory above MaxMemoryBytes.
	OutOfRange int
	// FirstOutOfRange is the first value skipped as out of range, with its line and the
	// rule it broke, for a warning that says where and why; nil when none was.
	FirstOutOfRange *InputError
	// Unsorted counts values that came earlier in time than the previous value of the
	// same pod; they are kept and sorted into place.
	Unsorted int
	// Trimmed counts values dropped by the reader's options: before the Duration
	// window, or of pods beyond MaxPods.
	Trimmed int
	// Orphans counts values of pods that have neither memory nor compute samples
	// (GenTD26 latency only); they are dropped.
	Orphans int
}

// outOfRange counts a value skipped as out of range at line of file, keeping the first
// with the column's name, the value and the rule it broke.
func (s *SignalStats) outOfRange(file string, line int, col string, v float64, rule string) {
	s.OutOfRange++
	if s.FirstOutOfRange == nil {
		s.FirstOutOfRange = &InputError{File: file, Line: line, Msg: fmt.Sprintf("%s %v is %s", col, v, rule)}
	}
}

// Skipped is the number of values not kept: Values − Kept.
func (s SignalStats) Skipped() int { return s.Values - s.Kept }

// String renders the counts on one line ("absent" for a missing input).
func (s SignalStats) String() string {
	if s.Missing {
		return "absent"
	}
	return fmt.Sprintf("values=%d kept=%d duplicates=%d out-of-range=%d unsorted=%d trimmed=%d orphans=%d",
		s.Values, s.Kept, s.Duplicates, s.OutOfRange, s.Unsorted, s.Trimmed, s.Orphans)
}

// String renders the skip counts of all signals on one line.
func (s Stats) String() string {
	return fmt.Sprintf("memory[%s] compute[%s] latency[%s]", s.Memory, s.Compute, s.Latency)
}

// csvTable reads a CSV file with a header, by column name.
type csvTable struct {
	file string
	r    *csv.Reader
	cols map[string]int
	rec  []string
	line int
}

// newCSVTable reads the header and checks that every required column is present.
func newCSVTable(r io.Reader, file string, required ...string) (*csvTable, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, inputErr(file, 1, "empty file, want a header with columns %s", strings.Join(required, ","))
	}
	if err != nil {
		return nil, csvErr(file, err)
	}
	t := &csvTable{file: file, r: cr, cols: map[string]int{}}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := t.cols[h]; dup {
			return nil, inputErr(file, 1, "column %q appears twice", h)
		}
		t.cols[h] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, inputErr(file, 1, "missing column %q (header: %s)", c, strings.Join(header, ","))
		}
	}
	return t, nil
}

func csvErr(file string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return inputErr(file, pe.Line, "%v", pe.Err)
	}
	return fmt.Errorf("%s: %w", file, err)
}

// next reads the next record; it returns false at the end of the file.
func (t *csvTable) next() (bool, error) {
	rec, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	var pe *csv.ParseError
	if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
		// A truncated or shifted row: say how it differs from the header.
		return false, inputErr(t.file, pe.StartLine, "%d fields, the header has %d (a truncated row, or a comma inside an unquoted cell?)", len(rec), len(t.cols))
	}
	if err != nil {
		return false, csvErr(t.file, err)
	}
	t.rec = rec
	t.line, _ = t.r.FieldPos(0)
	return true, nil
}

func (t *csvTable) has(col string) bool { _, ok := t.cols[col]; return ok }

// get returns the trimmed cell of col, or "" when the column is absent.
func (t *csvTable) get(col string) string {
	i, ok := t.cols[col]
	if !ok {
		return ""
	}
	return strings.TrimSpace(t.rec[i])
}

func (t *csvTable) errf(format string, args ...any) error {
	return inputErr(t.file, t.line, format, args...)
}

// number parses the cell of col as a finite, non-negative float.
func (t *csvTable) number(col string) (float64, error) {
	s := t.get(col)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || s == "" {
		return 0, t.errf("%s %q is not a number", col, s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, t.errf("%s %q is not a finite number", col, s)
	}
	if v < 0 {
		return 0, t.errf("%s %q is negative", col, s)
	}
	return v, nil
}

// unixSeconds parses the cell of col as Unix seconds (decimal, fraction allowed)
// and returns Unix milliseconds.
func (t *csvTable) unixSeconds(col string) (int64, error) {
	s := t.get(col)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || s == "" || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, t.errf("%s %q is not a number of Unix seconds", col, s)
	}
	if v > 1e11 && v <= 1e14 { // 1973 to 5138 in milliseconds, as Prometheus and pandas export them
		return 0, t.errf("%s %q is out of range (Unix seconds 0..1e11); it reads as Unix milliseconds (%s): divide by 1000", col, s, time.UnixMilli(int64(v)).UTC().Format(time.RFC3339))
	}
	if v < 0 || v > 1e11 {
		return 0, t.errf("%s %q is out of range (Unix seconds 0..1e11)", col, s)
	}
	return int64(math.Round(v * 1000)), nil
}

// timestamp parses the cell of col as Unix seconds or RFC 3339 and returns Unix
// milliseconds (sub-millisecond parts are truncated).
func (t *csvTable) timestamp(col string) (int64, error) {
	s := t.get(col)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return t.unixSeconds(col)
	}
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, t.errf("%s %q is neither Unix seconds nor RFC 3339", col, s)
	}
	if ts.Unix() < 0 || ts.Unix() > 1e11 {
		return 0, t.errf("%s %q is out of range", col, s)
	}
	return ts.UnixMilli(), nil
}

// rawPoint is a sample while reading: Unix milliseconds, value, input line.
type rawPoint struct {
	ms   int64
	v    float64
	line int
}

// rawSeries collects one pod's samples of one signal in input order.
type rawSeries struct {
	pts []rawPoint
}

func (s *rawSeries) add(p rawPoint, st *SignalStats) {
	if n := len(s.pts); n > 0 && p.ms < s.pts[n-1].ms {
		st.Unsorted++
	}
	s.pts = append(s.pts, p)
}

// finish sorts the samples by time (stable, so input order breaks ties) and drops
// exact duplicates, counting them in st. Two samples at the same time with
// different values are an error unless allowSameTime (per-request latencies).
func (s *rawSeries) finish(file, pod string, allowSameTime bool, st *SignalStats) ([]rawPoint, error) {
	sort.SliceStable(s.pts, func(i, j int) bool { return s.pts[i].ms < s.pts[j].ms })
	out := s.pts[:0]
	for _, p := range s.pts {
		dup := false
		// Compare with every kept sample at the same time.
		for k := len(out) - 1; k >= 0 && out[k].ms == p.ms; k-- {
			if out[k].v == p.v {
				dup = true
				break
			}
			if !allowSameTime {
				return nil, inputErr(file, p.line, "pod %s has two values at %s: %v (line %d) and %v",
					pod, time.UnixMilli(p.ms).UTC().Format(time.RFC3339Nano), out[k].v, out[k].line, p.v)
			}
		}
		if dup {
			st.Duplicates++
			continue
		}
		out = append(out, p)
	}
	s.pts = out
	return out, nil
}

// toPoints converts raw samples to Points, shifting times by shiftMs and dividing
// values by div.
func toPoints(raw []rawPoint, shiftMs int64, div float64) []Point {
	if len(raw) == 0 {
		return nil
	}
	out := make([]Point, len(raw))
	for i, p := range raw {
		out[i] = Point{T: time.UnixMilli(p.ms + shiftMs).UTC(), V: p.v / div}
	}
	return out
}
