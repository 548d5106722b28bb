package prom

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	jsoniter "github.com/json-iterator/go"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// NewAPI returns client_golang's Prometheus API over c whose Query and QueryRange (the
// calls without options) decode Prometheus' answer in one pass of json-iterator as it
// arrives, instead of client_golang's three passes over a copy of the whole body: its
// api/v1 reads the body into a buffer grown by doubling, scans it with encoding/json for
// the envelope, again for the result, and decodes every sample of a vector with
// encoding/json once more (model.Sample's UnmarshalJSON). At 10,000 pods that decoding
// was about a quarter of the recommender's steady-cycle CPU, and a history slice's answer
// (tens of MB) was held twice over while decoded (make bench-scale, docs/benchmarks.md).
//
// c builds the requests' URLs (NoPartialResponse's parameter is kept) and serves every
// other call, and a query with options; hc, the HTTP client c sends with
// (api.Config.Client; nil: one over api.DefaultRoundTripper, as api.NewClient), sends
// Query and QueryRange, as client_golang's DoGetFallback does. The values, warnings,
// infos and errors returned (*promv1.Error with client_golang's types and messages, the
// context's error for a request cut by it) are client_golang's: TestQueryAsClientGolang
// compares both on the same answers.
func NewAPI(c api.Client, hc *http.Client) promv1.API {
	if hc == nil {
		hc = &http.Client{Transport: api.DefaultRoundTripper}
	}
	return queryAPI{API: promv1.NewAPI(c), client: c, hc: hc, rr: &remoteRead{}}
}

type queryAPI struct {
	promv1.API
	client api.Client
	hc     *http.Client
	rr     *remoteRead // ReadRaw's state (remoteread.go)
}

// Query is promv1.API's Query, decoded in one pass.
func (a queryAPI) Query(ctx context.Context, query string, ts time.Time, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	if len(opts) > 0 {
		return a.API.Query(ctx, query, ts, opts...)
	}
	args := url.Values{"query": {query}}
	if !ts.IsZero() {
		args.Set("time", formatTime(ts))
	}
	return a.do(ctx, "/api/v1/query", args)
}

// QueryRange is promv1.API's QueryRange, decoded in one pass.
func (a queryAPI) QueryRange(ctx context.Context, query string, r promv1.Range, opts ...promv1.Option) (model.Value, promv1.Warnings, promv1.Infos, error) {
	if len(opts) > 0 {
		return a.API.QueryRange(ctx, query, r, opts...)
	}
	args := url.Values{"query": {query}, "start": {formatTime(r.Start)}, "end": {formatTime(r.End)},
		"step": {strconv.FormatFloat(r.Step.Seconds(), 'f', -1, 64)}}
	return a.do(ctx, "/api/v1/query_range", args)
}

// formatTime is client_golang's: seconds since the epoch with a fraction.
func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.Unix())+float64(t.Nanosecond())/1e9, 'f', -1, 64)
}

// do sends args to the endpoint ep as client_golang's DoGetFallback does: a POST form to
// the endpoint's URL (whose own query, e.g. NoPartialResponse's parameter, is kept in
// both), and a GET when the server answers 403, 405 or 501; then decodes the answer.
func (a queryAPI) do(ctx context.Context, ep string, args url.Values) (model.Value, promv1.Warnings, promv1.Infos, error) {
	u := a.client.URL(ep, nil)
	q := u.Query()
	for k, v := range args {
		q[k] = v
	}
	encoded := q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(encoded))
	if err != nil {
		return nil, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header["Idempotency-Key"] = nil // idempotent for the transport's retries, as client_golang
	resp, err := a.hc.Do(req)
	if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) {
		closeBody(resp)
		u.RawQuery = encoded
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil); err != nil {
			return nil, nil, nil, err
		}
		resp, err = a.hc.Do(req)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	defer closeBody(resp)
	v, warnings, infos, err := decodeAnswer(resp.StatusCode, resp.Body)
	if err != nil && ctx.Err() != nil {
		return nil, nil, nil, ctx.Err() // the read was cut by the context, as client_golang says
	}
	return v, warnings, infos, err
}

// closeBody reads what is left of the body, so the connection is reused, and closes it.
func closeBody(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// answer is the envelope of a Prometheus API answer.
type answer struct {
	status, errorType, errMsg string
	warnings, infos           []string
	value                     model.Value
}

// decodeAnswer decodes a query's answer with the HTTP status code and returns what
// client_golang's apiClientImpl.Do and queryResult return for it.
// A successful answer is decoded as it is read; an error answer, small, is read whole
// first (its body is the error's detail when it is not Prometheus' JSON).
func decodeAnswer(code int, r io.Reader) (model.Value, promv1.Warnings, promv1.Infos, error) {
	if code/100 == 2 {
		iter := jsoniter.Parse(jsoniter.ConfigDefault, r, 64<<10)
		var ans answer
		if err := ans.decode(iter, true); err != nil {
			return nil, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrBadResponse, Msg: err.Error()}
		}
		if ans.status == "error" {
			return ans.value, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrorType(ans.errorType), Msg: ans.errMsg}
		}
		return ans.value, ans.warnings, ans.infos, nil
	}
	body, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, nil, err
	}
	if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
		typ, msg := errorTypeAndMsgFor(code)
		return nil, nil, nil, &promv1.Error{Type: typ, Msg: msg, Detail: string(body)}
	}
	// 400 or 422: Prometheus' own error answers.
	var ans answer
	iter := jsoniter.ConfigDefault.BorrowIterator(body)
	defer jsoniter.ConfigDefault.ReturnIterator(iter)
	if err := ans.decode(iter, false); err != nil {
		typ, msg := errorTypeAndMsgFor(code)
		return nil, nil, nil, &promv1.Error{Type: typ, Msg: msg, Detail: string(body)}
	}
	if ans.status == "success" {
		return nil, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrBadResponse, Msg: "inconsistent body for response code"}
	}
	if ans.errorType == "" {
		ans.errorType = string(promv1.ErrClient)
	}
	if ans.errMsg == "" {
		ans.errMsg = fmt.Sprintf("client error: %d", code)
	}
	return nil, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrorType(ans.errorType), Msg: ans.errMsg}
}

// errorTypeAndMsgFor is client_golang's error for a status code without an API answer.
func errorTypeAndMsgFor(code int) (promv1.ErrorType, string) {
	switch code / 100 {
	case 4:
		return promv1.ErrClient, fmt.Sprintf("client error: %d", code)
	case 5:
		return promv1.ErrServer, fmt.Sprintf("server error: %d", code)
	}
	return promv1.ErrBadResponse, fmt.Sprintf("bad response code %d", code)
}

// decode reads the envelope; withData decodes its data (a query result), else skips it.
func (a *answer) decode(iter *jsoniter.Iterator, withData bool) error {
	if iter.WhatIsNext() != jsoniter.ObjectValue {
		return errors.New("prometheus answer is not a JSON object")
	}
	for field := iter.ReadObject(); field != "" && iter.Error == nil; field = iter.ReadObject() {
		switch field {
		case "status":
			a.status = iter.ReadString()
		case "errorType":
			a.errorType = iter.ReadString()
		case "error":
			a.errMsg = iter.ReadString()
		case "warnings":
			a.warnings = readStrings(iter, a.warnings)
		case "infos":
			a.infos = readStrings(iter, a.infos)
		case "isPartial": // VictoriaMetrics: a vmstorage node did not answer
			if iter.WhatIsNext() != jsoniter.BoolValue {
				iter.Skip()
			} else if iter.ReadBool() {
				a.warnings = append(a.warnings, PartialWarning)
			}
		case "data":
			if withData && iter.WhatIsNext() != jsoniter.NilValue {
				a.value = readResult(iter)
			} else {
				iter.Skip()
			}
		default:
			iter.Skip()
		}
	}
	if iter.Error != nil {
		return iter.Error // io.EOF too: the answer ended inside the object
	}
	return nil
}

func readStrings(iter *jsoniter.Iterator, out []string) []string {
	for iter.ReadArray() {
		out = append(out, iter.ReadString())
	}
	return out
}

// readResult reads a query result, {"resultType": …, "result": …}, as client_golang's
// queryResult: a model.Vector, model.Matrix or *model.Scalar (client_golang reads no
// other type, nor does Prometheus answer a query with a string). A result
// before its type is kept as bytes and read when the type comes.
func readResult(iter *jsoniter.Iterator) model.Value {
	var typ string
	var raw []byte
	var v model.Value
	for field := iter.ReadObject(); field != "" && iter.Error == nil; field = iter.ReadObject() {
		switch field {
		case "resultType":
			typ = iter.ReadString()
		case "result":
			if typ == "" {
				raw = iter.SkipAndReturnBytes()
				continue
			}
			v = readValue(iter, typ)
		default:
			iter.Skip()
		}
	}
	if raw != nil && iter.Error == nil {
		sub := jsoniter.ConfigDefault.BorrowIterator(raw)
		defer jsoniter.ConfigDefault.ReturnIterator(sub)
		if v = readValue(sub, typ); sub.Error != nil {
			iter.Error = sub.Error
		}
	}
	if v == nil && iter.Error == nil {
		iter.Error = typeError(typ)
	}
	return v
}

// typeError is client_golang's error for a result type it does not read (model.ValueType
// and queryResult's words).
func typeError(typ string) error {
	switch typ {
	case "", "<ValNone>":
		return errors.New(`unexpected value type "<ValNone>"`)
	case "scalar", "vector", "matrix", "string":
		return fmt.Errorf("unexpected value type %q", typ)
	}
	return fmt.Errorf("unknown value type %q", typ)
}

// readValue reads a result of the type typ.
func readValue(iter *jsoniter.Iterator, typ string) model.Value {
	switch typ {
	case "vector":
		return readVector(iter)
	case "matrix":
		return readMatrix(iter)
	case "scalar":
		t, v := readPair(iter)
		return &model.Scalar{Timestamp: t, Value: v}
	}
	iter.Skip()
	return nil
}

// readVector reads an instant vector's samples, as model.Sample's decoder does.
func readVector(iter *jsoniter.Iterator) model.Vector {
	vec := model.Vector{}
	for iter.ReadArray() {
		s := &model.Sample{}
		for field := iter.ReadObject(); field != "" && iter.Error == nil; field = iter.ReadObject() {
			switch field {
			case "metric":
				s.Metric = readMetric(iter)
			case "value":
				s.Timestamp, s.Value = readPair(iter)
			case "histogram":
				var h model.SampleHistogramPair
				iter.ReadVal(&h) // client_golang's decoder (registered with json-iterator)
				s.Timestamp, s.Histogram = h.Timestamp, h.Histogram
			default:
				iter.ReportError("decode prometheus vector", "unexpected key: "+field)
			}
		}
		vec = append(vec, s)
	}
	return vec
}

// readMatrix reads a range answer's series, as model.SampleStream's decoder does. The
// series of a range answer mostly hold the same points: each one's values start at the
// length of the one before, not growing by doubling (half the decoded samples' memory
// is otherwise spare capacity or garbage).
func readMatrix(iter *jsoniter.Iterator) model.Matrix {
	m := model.Matrix{}
	points := 0
	for iter.ReadArray() {
		s := &model.SampleStream{}
		for field := iter.ReadObject(); field != "" && iter.Error == nil; field = iter.ReadObject() {
			switch field {
			case "metric":
				s.Metric = readMetric(iter)
			case "values":
				s.Values = readPairs(iter, points)
			case "histograms":
				for iter.ReadArray() {
					var h model.SampleHistogramPair
					iter.ReadVal(&h)
					s.Histograms = append(s.Histograms, h)
				}
			default:
				iter.ReportError("decode prometheus matrix", "unexpected key: "+field)
			}
		}
		points = len(s.Values)
		m = append(m, s)
	}
	return m
}

// readPairs reads a series' [timestamp, "value"] points into a slice of capacity
// points (the series before's length; 0: grown as read); no points, no slice, as
// client_golang.
func readPairs(iter *jsoniter.Iterator, points int) []model.SamplePair {
	var out []model.SamplePair
	if points > 0 {
		out = make([]model.SamplePair, 0, points)
	}
	for iter.ReadArray() {
		t, v := readPair(iter)
		out = append(out, model.SamplePair{Timestamp: t, Value: v})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// readMetric reads a series' labels.
func readMetric(iter *jsoniter.Iterator) model.Metric {
	m := model.Metric{}
	for name := iter.ReadObject(); name != "" && iter.Error == nil; name = iter.ReadObject() {
		m[model.LabelName(name)] = model.LabelValue(iter.ReadString())
	}
	return m
}

// readPair reads [timestamp, "value"] as client_golang's model.SamplePair decoder does.
func readPair(iter *jsoniter.Iterator) (model.Time, model.SampleValue) {
	if !iter.ReadArray() {
		iter.ReportError("decode prometheus sample", "want [timestamp, value]")
		return 0, 0
	}
	t := readTime(iter)
	if !iter.ReadArray() {
		iter.ReportError("decode prometheus sample", "sample missing value")
		return 0, 0
	}
	f, err := strconv.ParseFloat(string(iter.ReadStringAsSlice()), 64)
	if err != nil {
		iter.ReportError("decode prometheus sample", err.Error())
		return 0, 0
	}
	if iter.ReadArray() {
		iter.ReportError("decode prometheus sample", "more than [timestamp, value]")
	}
	return t, model.SampleValue(f)
}

// readTime reads a timestamp in seconds (Prometheus writes milliseconds as a fraction)
// as model.Time, milliseconds.
func readTime(iter *jsoniter.Iterator) model.Time {
	return model.Time(math.Round(iter.ReadFloat64() * 1000))
}
