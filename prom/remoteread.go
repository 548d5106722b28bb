package prom

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// RemoteReadPath is the endpoint of Prometheus' remote read API (protobuf over HTTP,
// https://prometheus.io/docs/prometheus/latest/querying/remote_read_api/), served by
// Prometheus itself (no flag needed) and by Mimir and Cortex; Thanos Query and
// VictoriaMetrics do not serve it.
const RemoteReadPath = "/api/v1/read"

// ErrRemoteReadUnsupported is returned by ReadRaw when the backend does not serve
// RemoteReadPath (it answered 400, 403, 404, 405 or 501 once: no such endpoint, a proxy
// that forbids or does not know the path, a request it cannot parse; later calls return
// it without asking): the caller reads the same samples through the query API instead.
var ErrRemoteReadUnsupported = errors.New("the backend does not serve Prometheus' remote read API " + RemoteReadPath)

// maxFrameBytes bounds one frame of a streamed answer. Prometheus writes frames of
// about --storage.remote.read-max-bytes-in-frame (default 1 MiB), a series' chunks
// continued in the next frame; its own client's default limit is 50 MiB.
const maxFrameBytes = 50 << 20

// castagnoli is the CRC-32 table of the streamed answer's frames.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// remoteRead remembers, for the life of the API, that the backend does not serve
// RemoteReadPath.
type remoteRead struct{ unsupported atomic.Bool }

// ReadRaw returns the raw samples of the series that selector (a PromQL series
// selector, e.g. DCGM_FI_DEV_GPU_UTIL{namespace=~"a|b",pod!=""}) matches in (from, to],
// one model.SampleStream per series in time order, read through Prometheus' remote read
// API: the TSDB's XOR chunks streamed as they are stored (STREAMED_XOR_CHUNKS; the
// whole-sample SAMPLES answer of older servers is read too), decoded here with the TSDB's
// own chunk decoder. Prometheus evaluates nothing and encodes no JSON, and a chunk is
// about 1.4 bytes a sample against about 20 in JSON. Stale markers are returned as the
// NaN they are; samples outside (from, to] (a chunk holds about 2 hours) are dropped,
// and a sample stamped twice (overlapping chunks) is kept once.
//
// It implements metrics.RawReader: the recommender's raw-sample reads
// (metrics.Reader.RangeFromSamples) use it, and read the same range vector through the
// query API where it fails. Errors: ErrRemoteReadUnsupported; the selector's parse
// error; the HTTP status and body of a refused read (a 4xx or 5xx, e.g. Prometheus'
// --storage.remote.read-concurrent-limit); a frame that is corrupt, larger than 50 MiB
// or cut short; a chunk that holds histograms.
func (a queryAPI) ReadRaw(ctx context.Context, selector string, from, to time.Time) (model.Matrix, error) {
	if a.rr.unsupported.Load() {
		return nil, ErrRemoteReadUnsupported
	}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(selector)
	if err != nil {
		return nil, fmt.Errorf("remote read of %q: %w", selector, err)
	}
	q := &prompb.Query{StartTimestampMs: from.UnixMilli() + 1, EndTimestampMs: to.UnixMilli()}
	for _, m := range ms {
		q.Matchers = append(q.Matchers, &prompb.LabelMatcher{Type: matcherType[m.Type], Name: m.Name, Value: m.Value})
	}
	body, err := proto.Marshal(&prompb.ReadRequest{Queries: []*prompb.Query{q},
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES}})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.client.URL(RemoteReadPath, nil).String(), bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("Accept-Encoding", "snappy")
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("X-Prometheus-Remote-Read-Version", "0.1.0")
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("remote read of %q: %w", selector, err)
	}
	defer closeBody(resp)
	switch {
	case unsupportedStatus[resp.StatusCode]:
		a.rr.unsupported.Store(true)
		return nil, ErrRemoteReadUnsupported
	case resp.StatusCode/100 != 2:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("remote read of %q: %s: %s", selector, resp.Status, strings.TrimSpace(string(msg)))
	}
	var m model.Matrix
	switch ct := resp.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse"):
		m, err = readChunked(resp.Body, q.StartTimestampMs, q.EndTimestampMs)
	case strings.HasPrefix(ct, "application/x-protobuf"):
		m, err = readSampled(resp.Body)
	default:
		err = fmt.Errorf("content type %q: want a remote read answer", ct)
	}
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("remote read of %q: %w", selector, err)
	}
	return m, nil
}

// unsupportedStatus are the answers after which the remote read is not asked again.
var unsupportedStatus = map[int]bool{http.StatusBadRequest: true, http.StatusForbidden: true, http.StatusNotFound: true,
	http.StatusMethodNotAllowed: true, http.StatusNotImplemented: true}

var matcherType = map[labels.MatchType]prompb.LabelMatcher_Type{
	labels.MatchEqual: prompb.LabelMatcher_EQ, labels.MatchNotEqual: prompb.LabelMatcher_NEQ,
	labels.MatchRegexp: prompb.LabelMatcher_RE, labels.MatchNotRegexp: prompb.LabelMatcher_NRE,
}

// readChunked decodes a STREAMED_XOR_CHUNKS answer: frames of a uvarint length, the
// CRC-32 (Castagnoli, big-endian) of the frame and a ChunkedReadResponse, a series
// continued over consecutive frames under the same labels. Samples outside [mint, maxt]
// are dropped.
func readChunked(r io.Reader, mint, maxt int64) (model.Matrix, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		out    model.Matrix
		frame  []byte
		msg    prompb.ChunkedReadResponse
		it     chunkenc.Iterator
		chunks []chunkenc.Chunk
	)
	for {
		size, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			for _, s := range out {
				s.Values = inOrder(s.Values)
			}
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("frame length: %w", err)
		}
		if size > maxFrameBytes {
			return nil, fmt.Errorf("frame of %d bytes, more than %d", size, maxFrameBytes)
		}
		var sum [4]byte
		if _, err := io.ReadFull(br, sum[:]); err != nil {
			return nil, fmt.Errorf("frame checksum: %w", io.ErrUnexpectedEOF)
		}
		frame = slices.Grow(frame[:0], int(size))[:size]
		if _, err := io.ReadFull(br, frame); err != nil {
			return nil, fmt.Errorf("frame of %d bytes: %w", size, io.ErrUnexpectedEOF)
		}
		if crc32.Checksum(frame, castagnoli) != binary.BigEndian.Uint32(sum[:]) {
			return nil, errors.New("corrupt frame: checksum mismatch")
		}
		msg.Reset()
		if err := proto.Unmarshal(frame, &msg); err != nil {
			return nil, fmt.Errorf("frame: %w", err)
		}
		for _, cs := range msg.ChunkedSeries {
			metric := metricOf(cs.Labels)
			var s *model.SampleStream
			if n := len(out); n > 0 && out[n-1].Metric.Equal(metric) {
				s = out[n-1] // continued from the previous frame
			} else {
				s = &model.SampleStream{Metric: metric}
				out = append(out, s)
			}
			// The series' chunks in the range, their samples counted first so that
			// the values grow once.
			chunks = chunks[:0]
			n := 0
			for _, c := range cs.Chunks {
				if c.MaxTimeMs < mint || c.MinTimeMs > maxt {
					continue
				}
				ch, err := chunkenc.FromData(chunkenc.Encoding(c.Type), c.Data)
				if err != nil {
					return nil, fmt.Errorf("chunk of %s: %w", metric, err)
				}
				chunks, n = append(chunks, ch), n+ch.NumSamples()
			}
			s.Values = slices.Grow(s.Values, n)
			for _, ch := range chunks {
				it = ch.Iterator(it)
				for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
					if vt != chunkenc.ValFloat {
						return nil, fmt.Errorf("chunk of %s holds %s samples, not floats", metric, vt)
					}
					t, v := it.At()
					if t >= mint && t <= maxt {
						s.Values = append(s.Values, model.SamplePair{Timestamp: model.Time(t), Value: model.SampleValue(v)})
					}
				}
				if err := it.Err(); err != nil {
					return nil, fmt.Errorf("chunk of %s: %w", metric, err)
				}
			}
		}
	}
}

// readSampled decodes a SAMPLES answer: one snappy-compressed ReadResponse.
func readSampled(r io.Reader) (model.Matrix, error) {
	compressed, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	data, err := snappy.Decode(nil, compressed)
	if err != nil {
		return nil, fmt.Errorf("snappy: %w", err)
	}
	var resp prompb.ReadResponse
	if err := proto.Unmarshal(data, &resp); err != nil {
		return nil, err
	}
	var out model.Matrix
	for _, res := range resp.Results {
		for _, ts := range res.Timeseries {
			if len(ts.Histograms) > 0 {
				return nil, fmt.Errorf("series %s holds histograms, not floats", metricOf(ts.Labels))
			}
			s := &model.SampleStream{Metric: metricOf(ts.Labels), Values: make([]model.SamplePair, len(ts.Samples))}
			for i, p := range ts.Samples {
				s.Values[i] = model.SamplePair{Timestamp: model.Time(p.Timestamp), Value: model.SampleValue(p.Value)}
			}
			s.Values = inOrder(s.Values)
			out = append(out, s)
		}
	}
	return out, nil
}

func metricOf(ls []prompb.Label) model.Metric {
	m := make(model.Metric, len(ls))
	for _, l := range ls {
		m[model.LabelName(l.Name)] = model.LabelValue(l.Value)
	}
	return m
}

// inOrder sorts ps by time and keeps one sample per timestamp (the last read), as the
// query API does where a series' chunks overlap. It sorts nothing when ps is in order.
func inOrder(ps []model.SamplePair) []model.SamplePair {
	sorted := true
	for i := 1; i < len(ps) && sorted; i++ {
		sorted = ps[i-1].Timestamp < ps[i].Timestamp
	}
	if sorted {
		return ps
	}
	slices.SortStableFunc(ps, func(a, b model.SamplePair) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
	out := ps[:0]
	for i, p := range ps {
		if i+1 < len(ps) && ps[i+1].Timestamp == p.Timestamp {
			continue
		}
		out = append(out, p)
	}
	return out
}
