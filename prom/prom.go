// Package prom builds the Prometheus HTTP API client every gpufrac component uses, from
// flags: address, bearer token file, basic auth, TLS CA and client certificates, extra
// headers (e.g. X-Scope-OrgID for Thanos, Mimir or Cortex) and a query timeout. The
// transport comes from github.com/prometheus/common/config, so files are re-read as
// Prometheus itself re-reads them.
package prom

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	commoncfg "github.com/prometheus/common/config"
)

// Config is how to reach a Prometheus-compatible query API.
type Config struct {
	// URL is the base URL, e.g. http://prometheus.monitoring:9090.
	URL string
	// Timeout bounds each query. Default 30s.
	Timeout time.Duration
	// BearerTokenFile is read for an Authorization: Bearer header.
	BearerTokenFile string
	// BasicAuthUsername and BasicAuthPasswordFile set HTTP basic auth.
	BasicAuthUsername, BasicAuthPasswordFile string
	// CAFile, CertFile and KeyFile configure TLS; InsecureSkipVerify disables checks.
	CAFile, CertFile, KeyFile string
	InsecureSkipVerify        bool
	// Headers are extra request headers, "Name=Value" each.
	Headers headerFlags
	// RemoteRead lets raw-sample reads use Prometheus' remote read API (RemoteReadPath,
	// ReadRaw); false reads them through the query API only. Default true.
	RemoteRead bool
}

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ",") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

// AddFlags registers the --prometheus-* flags.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "prometheus-url", "http://localhost:9090", "Base URL of the Prometheus query API (Prometheus, Thanos Query, Mimir, Cortex).")
	fs.DurationVar(&c.Timeout, "prometheus-timeout", 30*time.Second, "Timeout of one query.")
	fs.StringVar(&c.BearerTokenFile, "prometheus-bearer-token-file", "", "File holding a bearer token sent with each query.")
	fs.StringVar(&c.BasicAuthUsername, "prometheus-basic-auth-username", "", "HTTP basic auth user name.")
	fs.StringVar(&c.BasicAuthPasswordFile, "prometheus-basic-auth-password-file", "", "File holding the HTTP basic auth password.")
	fs.StringVar(&c.CAFile, "prometheus-ca-file", "", "CA bundle to verify Prometheus' TLS certificate.")
	fs.StringVar(&c.CertFile, "prometheus-cert-file", "", "Client certificate for TLS client authentication.")
	fs.StringVar(&c.KeyFile, "prometheus-key-file", "", "Client key for TLS client authentication.")
	fs.BoolVar(&c.InsecureSkipVerify, "prometheus-insecure-skip-verify", false, "Do not verify Prometheus' TLS certificate (tests only).")
	fs.BoolVar(&c.RemoteRead, "prometheus-remote-read", true, "Read a history load's raw samples through the remote read API ("+RemoteReadPath+", streamed chunks) where the backend serves it; false: through the query API only.")
	fs.Var(&c.Headers, "prometheus-header", "Extra request header Name=Value (repeatable), e.g. X-Scope-OrgID=team-a.")
}

// API returns the query API client. It returns an error for an empty URL or one that is
// not http(s) with a host (prometheus:9090 without its scheme parses as the scheme
// "prometheus", and every query would fail), a malformed header, or an invalid HTTP
// client configuration (e.g. a key without a certificate).
func (c *Config) API() (promv1.API, error) {
	if c.URL == "" {
		return nil, fmt.Errorf("--prometheus-url is empty")
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--prometheus-url %q: want an http(s) URL such as http://prometheus.monitoring:9090", c.URL)
	}
	hc := commoncfg.DefaultHTTPClientConfig
	hc.BearerTokenFile = c.BearerTokenFile
	if c.BasicAuthUsername != "" || c.BasicAuthPasswordFile != "" {
		hc.BasicAuth = &commoncfg.BasicAuth{Username: c.BasicAuthUsername, PasswordFile: c.BasicAuthPasswordFile}
	}
	hc.TLSConfig = commoncfg.TLSConfig{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, InsecureSkipVerify: c.InsecureSkipVerify}
	if len(c.Headers) > 0 {
		hc.HTTPHeaders = &commoncfg.Headers{Headers: map[string]commoncfg.Header{}}
		for _, h := range c.Headers {
			name, value, ok := strings.Cut(h, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("--prometheus-header %q: want Name=Value", h)
			}
			hc.HTTPHeaders.Headers[name] = commoncfg.Header{Values: []string{value}}
		}
	}
	if err := hc.Validate(); err != nil {
		return nil, fmt.Errorf("prometheus client config: %w", err)
	}
	rt, err := commoncfg.NewRoundTripperFromConfig(hc, "gpufrac")
	if err != nil {
		return nil, fmt.Errorf("prometheus client: %w", err)
	}
	httpc := &http.Client{Transport: rt}
	client, err := api.NewClient(api.Config{Address: c.URL, Client: httpc})
	if err != nil {
		return nil, fmt.Errorf("prometheus client for %s: %w", c.URL, err)
	}
	a := NewAPI(NoPartialResponse(client), httpc).(queryAPI)
	a.rr.unsupported.Store(!c.RemoteRead)
	return a, nil
}

// PartialResponseParam is the query parameter with which Thanos Query (and Thanos-style
// proxies) fail a query rather than answer it without a store; Prometheus, Mimir and
// Cortex ignore it.
const PartialResponseParam = "partial_response"

// DenyPartialResponseParam is the query parameter with which VictoriaMetrics' cluster
// vmselect fails a query rather than answer it without a vmstorage node (its
// -search.denyPartialResponse per request); the others ignore it.
const DenyPartialResponseParam = "deny_partial_response"

// PartialWarning is the warning a successful answer that says it is partial without a
// warning (VictoriaMetrics' "isPartial": true: a vmstorage node did not answer, series
// may be missing) is read with, so the reader refuses it as it refuses Thanos', Mimir's
// and Cortex's partial answers (metrics.ErrPartialResponse).
const PartialWarning = `the answer says "isPartial": true (VictoriaMetrics: a vmstorage node did not answer; series may be missing)`

// NoPartialResponse wraps c so that every request asks for no partial responses
// (partial_response=false for Thanos, deny_partial_response=1 for VictoriaMetrics): a
// backend that supports it fails instead of omitting series. A backend that answers in
// part anyway is still caught by the reader (metrics.ErrPartialResponse): with warnings,
// or with "isPartial": true, read as PartialWarning.
func NoPartialResponse(c api.Client) api.Client { return noPartial{c} }

type noPartial struct{ api.Client }

// URL adds partial_response=false and deny_partial_response=1 to every endpoint URL;
// client_golang copies the URL's query into the form it sends, so they reach both POST
// and GET requests.
func (n noPartial) URL(ep string, args map[string]string) *url.URL {
	u := n.Client.URL(ep, args)
	q := u.Query()
	q.Set(PartialResponseParam, "false")
	q.Set(DenyPartialResponseParam, "1")
	u.RawQuery = q.Encode()
	return u
}

// Do is the client's, with an answer that says "isPartial": true given PartialWarning
// among its warnings, for the calls client_golang decodes (label values, series; Query
// and QueryRange are decoded by NewAPI's answer, which reads it too).
func (n noPartial) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := n.Client.Do(ctx, req)
	if err != nil || !bytes.Contains(body, []byte(`"isPartial"`)) {
		return resp, body, err
	}
	var env map[string]json.RawMessage
	if json.Unmarshal(body, &env) != nil {
		return resp, body, err // not an object: client_golang says so
	}
	var partial bool
	if json.Unmarshal(env["isPartial"], &partial) != nil || !partial {
		return resp, body, err
	}
	var warnings []string
	_ = json.Unmarshal(env["warnings"], &warnings)
	w, merr := json.Marshal(append(warnings, PartialWarning))
	if merr != nil {
		return resp, body, err
	}
	env["warnings"] = w
	if b, merr := json.Marshal(env); merr == nil {
		body = b
	}
	return resp, body, err
}
