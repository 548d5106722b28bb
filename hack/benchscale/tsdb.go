package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/gpufrac/gpufrac/trace"
)

// commitEvery is how many samples one TSDB appender holds before Commit: bounded so the
// pending batch stays small (promtool commits every 5,000).
const commitEvery = 1 << 20

// blockWriter appends traces' series, their samples in [from, to), into one TSDB block, the format promtool's
// `tsdb create-blocks-from openmetrics` writes, without the OpenMetrics text in between:
// at 10,000 pods × 8 days per minute that text would be ≈120 GB and promtool parses
// its input once per 2-hour block.
type blockWriter struct {
	w       *tsdb.BlockWriter
	app     storage.Appender
	pending int
	// from and to bound the samples appended, Unix milliseconds, to inclusive.
	from, to int64
	// Samples and Series count what was appended.
	Samples, Series int
}

// newBlockWriter returns a writer of one block into dir for the samples in [from, to)
// (its add skips the others). The head's chunk range is twice the window: the head
// accepts a sample only within half a chunk range of its newest one, and each series
// starts at the beginning.
func newBlockWriter(ctx context.Context, dir string, from, to time.Time) (*blockWriter, error) {
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, 2*to.Sub(from).Milliseconds())
	if err != nil {
		return nil, err
	}
	return &blockWriter{w: w, app: w.Appender(ctx), from: from.UnixMilli(), to: to.UnixMilli()}, nil
}

// add appends every series of t (trace.EachSeries, the series WriteOpenMetrics writes)
// with a sample in the writer's window, and their samples in it.
func (b *blockWriter) add(ctx context.Context, t trace.Trace, opts trace.OpenMetricsOptions) error {
	return trace.EachSeries(t, opts, func(s trace.Series) error {
		lset := labels.FromStrings(append([]string{model.MetricNameLabel, s.Name}, s.Labels...)...)
		var ref storage.SeriesRef
		var err error
		in := false
		for ms, v := range s.Samples {
			if ms < b.from || ms >= b.to {
				continue
			}
			in = true
			if ref, err = b.app.Append(ref, lset, ms, v); err != nil {
				return fmt.Errorf("append %s at %d: %w", lset, ms, err)
			}
			b.Samples++
			if b.pending++; b.pending >= commitEvery {
				if err := b.app.Commit(); err != nil {
					return err
				}
				b.app, b.pending = b.w.Appender(ctx), 0
			}
		}
		if in {
			b.Series++
		}
		return nil
	})
}

// eachBlock writes the samples of [from, to] into blocks in dir, one per span, newest
// first: fill appends into each block's writer (newest is true for the block that ends
// at to), which eachBlock then writes; on fill's error it writes nothing more.
func eachBlock(ctx context.Context, dir string, from, to time.Time, span time.Duration, fill func(bw *blockWriter, newest bool) error) error {
	end := to.Add(time.Millisecond) // the window is half-open; the newest includes to
	for end.After(from) {
		start := end.Add(-span)
		if start.Before(from) {
			start = from
		}
		bw, err := newBlockWriter(ctx, dir, start, end)
		if err != nil {
			return err
		}
		if err := fill(bw, end.After(to)); err != nil {
			bw.w.Close()
			return err
		}
		if err := bw.flush(ctx); err != nil {
			return err
		}
		end = start
	}
	return nil
}

// flush commits and writes the block, then frees the writer's head.
func (b *blockWriter) flush(ctx context.Context) error {
	defer b.w.Close()
	if err := b.app.Commit(); err != nil {
		return err
	}
	_, err := b.w.Flush(ctx)
	return err
}
