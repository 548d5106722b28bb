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
// calls without options) decode Prometheus' answer in one pass of json-iterator instead
// of client_golang's three: its api/v1 scans the body with encoding/json for the
// envelope, again for the result, and decodes every sample of a vector with
// encoding/json once more (model.Sample's UnmarshalJSON). At 10,000 pods that decoding
// was about a quarter of the recommender's steady-cycle CPU (make bench-scale,
// docs/benchmarks.md). The request (endpoint, form, POST with the GET fallback of
// client_golang's DoGetFallback), the errors (*promv1.Error with client_golang's types
// and messages), warnings, infos and the values returned are client_golang's:
// TestQueryAsClientGolang compares both on the same answers. Every other call, and a
// query with options, is client_golang's own.
func NewAPI(c api.Client) promv1.API { return queryAPI{API: promv1.NewAPI(c), client: c} }

type queryAPI struct {
	promv1.API
	client api.Client
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
// both), and a GET when the server answers 403, 405 or 501.
func (a queryAPI) do(ctx context.Context, ep string, args url.Values) (model.Value, promv1.Warnings, promv1.Infos, error) {
	u := a.client.URL(ep, nil)
	q := u.Query()
	for k, v := range args {
		q[k] = v
	}
	encoded := q.Encode()
	req, err := http.NewRequest(http.MethodPost, u.String(), strings.NewReader(encoded))
	if err != nil {
		return nil, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header["Idempotency-Key"] = nil // idempotent for the transport's retries, as client_golang
	resp, body, err := a.client.Do(ctx, req)
	if resp != nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusNotImplemented) {
		u.RawQuery = encoded
		if req, err = http.NewRequest(http.MethodGet, u.String(), nil); err != nil {
			return nil, nil, nil, err
		}
		resp, body, err = a.client.Do(ctx, req)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return decodeAnswer(resp.StatusCode, body)
}

// answer is the envelope of a Prometheus API answer.
type answer struct {
	status, errorType, errMsg string
	warnings, infos           []string
	value                     model.Value
}

// decodeAnswer decodes a query's answer with the HTTP status code and returns what
// client_golang's apiClientImpl.Do and queryResult return for it.
func decodeAnswer(code int, body []byte) (model.Value, promv1.Warnings, promv1.Infos, error) {
	if code/100 != 2 && code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
		typ, msg := errorTypeAndMsgFor(code)
		return nil, nil, nil, &promv1.Error{Type: typ, Msg: msg, Detail: string(body)}
	}
	var ans answer
	err := ans.decode(body, code/100 == 2)
	if code/100 != 2 { // 400 or 422: Prometheus' own error answers
		if err != nil {
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
	if err != nil {
		return nil, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrBadResponse, Msg: err.Error()}
	}
	if ans.status == "error" {
		return ans.value, ans.warnings, ans.infos, &promv1.Error{Type: promv1.ErrorType(ans.errorType), Msg: ans.errMsg}
	}
	return ans.value, ans.warnings, ans.infos, nil
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
func (a *answer) decode(body []byte, withData bool) error {
	iter := jsoniter.ConfigDefault.BorrowIterator(body)
	defer jsoniter.ConfigDefault.ReturnIterator(iter)
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
	if iter.Error != nil && !errors.Is(iter.Error, io.EOF) {
		return iter.Error
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
		if v = readValue(sub, typ); sub.Error != nil && !errors.Is(sub.Error, io.EOF) {
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
	case "matrix":
		m := model.Matrix{}
		for iter.ReadArray() {
			s := &model.SampleStream{}
			for field := iter.ReadObject(); field != "" && iter.Error == nil; field = iter.ReadObject() {
				switch field {
				case "metric":
					s.Metric = readMetric(iter)
				case "values":
					for iter.ReadArray() {
						t, v := readPair(iter)
						s.Values = append(s.Values, model.SamplePair{Timestamp: t, Value: v})
					}
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
			m = append(m, s)
		}
		return m
	case "scalar":
		t, v := readPair(iter)
		return &model.Scalar{Timestamp: t, Value: v}
	}
	iter.Skip()
	return nil
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
