package promtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/gogo/protobuf/proto"
	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// RemoteReadPrefix starts the text Queries records for a remote read: the prefix, then
// the query's matchers as a series selector, e.g.
// "remote read {__name__="DCGM_FI_PROF_SM_ACTIVE",namespace=~"ml"}". SetFailureIf's
// match sees the same text.
const RemoteReadPrefix = "remote read "

// SetRemoteRead makes the server answer /api/v1/read (true, the default, as Prometheus
// does) or 404 (false, as Thanos Query and VictoriaMetrics do).
func (s *Server) SetRemoteRead(on bool) {
	s.mu.Lock()
	s.noRemoteRead = !on
	s.mu.Unlock()
}

// remoteRead answers Prometheus' remote read API with STREAMED_XOR_CHUNKS, as
// Prometheus does: per series, XOR chunks of at most 120 samples over the query's
// [start, end] (whole chunks: samples outside it come too, as from Prometheus); each chunk in a frame of its own, so a series continues over frames
// under the same labels, as Prometheus' frames of at most 1 MiB do for long series.
func (s *Server) remoteRead(w http.ResponseWriter, r *http.Request) {
	compressed, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data, err := snappy.Decode(nil, compressed)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req prompb.ReadRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse")
	for qi, q := range req.Queries {
		var ms []*labels.Matcher
		var text []string
		for _, m := range q.Matchers {
			lm, err := labels.NewMatcher(labels.MatchType(m.Type), m.Name, m.Value)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			ms = append(ms, lm)
			text = append(text, lm.String())
		}
		sel := RemoteReadPrefix + "{" + strings.Join(text, ",") + "}"
		_, fail := s.record(sel)
		s.mu.Lock()
		noRead := s.noRemoteRead
		s.mu.Unlock()
		switch {
		case noRead:
			http.NotFound(w, r)
			return
		case fail != nil:
			http.Error(w, fail.Error(), http.StatusServiceUnavailable)
			return
		}
		// Whole chunks, as Prometheus streams the stored ones: samples outside the
		// query's range come too, for the client to drop.
		querier, err := s.Storage.Querier(math.MinInt64, math.MaxInt64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		set := querier.Select(r.Context(), true, nil, ms...)
		for set.Next() {
			series := set.At()
			var lbls []prompb.Label
			series.Labels().Range(func(l labels.Label) { lbls = append(lbls, prompb.Label{Name: l.Name, Value: l.Value}) })
			it := series.Iterator(nil)
			var chunk *chunkenc.XORChunk
			var app chunkenc.Appender
			var first, last int64
			flush := func() error {
				if chunk == nil || last < q.StartTimestampMs || first > q.EndTimestampMs {
					chunk = nil
					return nil
				}
				err := writeFrame(w, &prompb.ChunkedReadResponse{QueryIndex: int64(qi), ChunkedSeries: []*prompb.ChunkedSeries{{
					Labels: lbls, Chunks: []prompb.Chunk{{MinTimeMs: first, MaxTimeMs: last, Type: prompb.Chunk_XOR, Data: chunk.Bytes()}}}}})
				chunk = nil
				return err
			}
			for it.Next() != chunkenc.ValNone {
				t, v := it.At()
				if chunk == nil {
					chunk = chunkenc.NewXORChunk()
					if app, err = chunk.Appender(); err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					first = t
				}
				app.Append(0, t, v)
				last = t
				if chunk.NumSamples() == 120 {
					if err := flush(); err != nil {
						return
					}
				}
			}
			if err := flush(); err != nil {
				return
			}
		}
		_ = querier.Close()
		if err := set.Err(); err != nil {
			return // the stream is cut short: the client reads an unexpected end
		}
	}
}

// writeFrame writes msg as a frame of a streamed answer: its length (uvarint), its
// CRC-32 (Castagnoli, big-endian), its bytes.
func writeFrame(w io.Writer, msg proto.Message) error {
	b, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	var head [binary.MaxVarintLen64 + 4]byte
	n := binary.PutUvarint(head[:], uint64(len(b)))
	binary.BigEndian.PutUint32(head[n:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	if _, err := w.Write(head[:n+4]); err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("frame: %w", err)
	}
	return nil
}

// RemoteReadRange returns the earliest start and latest end of the queries of r, a
// request to /api/v1/read, and true; false for any other request or one that does not
// decode. r's body is read and put back, so r can still be served.
func RemoteReadRange(r *http.Request) (start, end time.Time, ok bool) {
	if r.URL.Path != "/api/v1/read" || r.Body == nil {
		return start, end, false
	}
	compressed, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(compressed))
	if err != nil {
		return start, end, false
	}
	data, err := snappy.Decode(nil, compressed)
	var req prompb.ReadRequest
	if err != nil || proto.Unmarshal(data, &req) != nil || len(req.Queries) == 0 {
		return start, end, false
	}
	for i, q := range req.Queries {
		s, e := time.UnixMilli(q.StartTimestampMs), time.UnixMilli(q.EndTimestampMs)
		if i == 0 || s.Before(start) {
			start = s
		}
		if i == 0 || e.After(end) {
			end = e
		}
	}
	return start, end, true
}
