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

// blockWriter appends traces' series into one TSDB block, the format promtool's
// `tsdb create-blocks-from openmetrics` writes, without the OpenMetrics text in between:
// at 10,000 pods × 8 days per minute that text would be ≈120 GB and promtool parses
// its input once per 2-hour block.
type blockWriter struct {
	w       *tsdb.BlockWriter
	app     storage.Appender
	pending int
	// Samples and Series count what was appended.
	Samples, Series int
}

// newBlockWriter returns a writer of one block into dir for samples spanning at most
// span. The head's chunk range is twice the span: the head accepts a sample only
// within half a chunk range of its newest one, and each series starts at the beginning.
func newBlockWriter(ctx context.Context, dir string, span time.Duration) (*blockWriter, error) {
	w, err := tsdb.NewBlockWriter(slog.New(slog.DiscardHandler), dir, 2*span.Milliseconds())
	if err != nil {
		return nil, err
	}
	return &blockWriter{w: w, app: w.Appender(ctx)}, nil
}

// add appends every series of t (trace.EachSeries, the series WriteOpenMetrics writes).
func (b *blockWriter) add(ctx context.Context, t trace.Trace, opts trace.OpenMetricsOptions) error {
	return trace.EachSeries(t, opts, func(s trace.Series) error {
		lset := labels.FromStrings(append([]string{model.MetricNameLabel, s.Name}, s.Labels...)...)
		var ref storage.SeriesRef
		var err error
		for ms, v := range s.Samples {
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
		b.Series++
		return nil
	})
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
