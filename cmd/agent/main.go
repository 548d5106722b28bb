// Command agent is gpufrac's node agent, run as a DaemonSet on GPU nodes: it reads
// per-process GPU memory and SM utilisation from NVML, attributes each process to its
// pod and container, and serves them as Prometheus metrics on /metrics (see
// docs/agent.md). With --simulate it replays a trace on fake GPUs instead, attributing
// the fake processes to the live pods of the cluster, so a cluster without GPUs shows
// the same metrics.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/agent"
	"github.com/gpufrac/gpufrac/agent/fakenvml"
	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/cmd/internal/bootstrap"
	"github.com/gpufrac/gpufrac/trace"
)

func main() { bootstrap.Main("agent", run) }

type options struct {
	listen, kubeconfig, nodeName, procRoot, nvmlLibrary string
	cfg                                                 agent.Config
	podSyncTimeout                                      time.Duration

	simulate             bool
	tracePath, gpuMemory string
	sim                  fakenvml.Config
}

func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	fs.StringVar(&o.listen, "listen", ":9410", "Address of the HTTP server: /metrics, /healthz, /readyz.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path of a kubeconfig; empty uses $KUBECONFIG, ~/.kube/config, else the in-cluster service account.")
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "Node whose pods to watch (field selector spec.nodeName); default $NODE_NAME; empty watches every pod of the cluster.")
	fs.StringVar(&o.procRoot, "proc-root", "/proc", "The host's /proc as the agent sees it (in a DaemonSet with hostPID: true and the host's /proc mounted: /host/proc).")
	fs.StringVar(&o.nvmlLibrary, "nvml-library", "", "Path of libnvidia-ml.so.1 (default: the dynamic loader's search path).")
	fs.DurationVar(&o.cfg.Interval, "interval", agent.DefaultInterval, "Sampling period; utilisation is averaged over it (at least 1s).")
	fs.BoolVar(&o.cfg.NVMLRequired, "nvml-required", true, "Exit with an error when NVML cannot be initialised; false idles with gpufrac_agent_up 0 and retries every --nvml-retry-interval.")
	fs.DurationVar(&o.cfg.InitRetry, "nvml-retry-interval", agent.DefaultInitRetry, "nvmlInit retry period with --nvml-required=false.")
	fs.DurationVar(&o.podSyncTimeout, "pod-sync-timeout", 30*time.Second, "How long to wait for the pod informer's first list before sampling anyway.")
	fs.BoolVar(&o.simulate, "simulate", false, "Replay --trace on fake GPUs instead of reading NVML (no GPU needed).")
	fs.StringVar(&o.tracePath, "trace", "", "With --simulate: the long-format CSV trace (timestamp,namespace,pod,container,memory_bytes,compute_ratio), e.g. from `gpufrac trace synth --long-csv`.")
	fs.Float64Var(&o.sim.Speed, "simulate-speed", 1, "With --simulate: trace seconds replayed per wall-clock second.")
	fs.BoolVar(&o.sim.Loop, "simulate-loop", true, "With --simulate: start the trace over after its end; false holds its last samples.")
	fs.DurationVar(&o.sim.Offset, "simulate-offset", 0, "With --simulate: where in the trace the replay starts.")
	fs.IntVar(&o.sim.GPUs, "simulate-gpus", fakenvml.DefaultGPUs, "With --simulate: number of fake GPUs the processes are spread over.")
	fs.StringVar(&o.gpuMemory, "simulate-gpu-memory", "81559Mi", "With --simulate: memory of one fake GPU (quantity, bytes, binary units such as 81559Mi or 80Gi; 80G, decimal, is refused).")
	fs.StringVar(&o.sim.Model, "simulate-model", fakenvml.DefaultModel, "With --simulate: product name of the fake GPUs.")
	fs.DurationVar(&o.sim.Hold, "simulate-hold", 0, "With --simulate: how long a trace sample stays valid (default 3 × the trace's median step).")
	klog.InitFlags(fs)
	if err := bootstrap.Parse(fs, args); err != nil { // a bad flag: its error and a --help hint, not every flag
		return nil, err
	}
	// Waits below 0 (and a retry period of 0) would be replaced without a word.
	if err := errors.Join(bootstrap.Positive(fs, "nvml-retry-interval", "simulate-gpus"),
		bootstrap.NonNegative(fs, "pod-sync-timeout", "simulate-offset", "simulate-hold")); err != nil {
		return nil, err
	}
	if o.cfg.Interval < time.Second {
		return nil, fmt.Errorf("--interval %s: must be at least 1s (NVML's sample period is up to 1s)", o.cfg.Interval)
	}
	if o.simulate {
		if o.tracePath == "" {
			return nil, errors.New("--simulate needs --trace")
		}
		v, err := backend.ParseGPUMemory(o.gpuMemory) // as every --gpu-memory: 80G is refused, not 74.5 GiB
		if err != nil {
			return nil, fmt.Errorf("--simulate-gpu-memory %w", err)
		}
		o.sim.GPUMemoryBytes = uint64(v)
		if o.sim.Speed <= 0 {
			return nil, fmt.Errorf("--simulate-speed %v: must be positive", o.sim.Speed)
		}
		o.sim.Seed = o.nodeName
		o.cfg.Mode = agent.ModeSimulate
	} else if o.tracePath != "" {
		return nil, errors.New("--trace needs --simulate")
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	pods, err := newPodIndex(o)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	lib, attr, err := newGPUs(o, pods, reg)
	if err != nil {
		return err
	}
	sampler := agent.NewSampler(lib, attr, o.cfg)
	reg.MustRegister(sampler)

	srv := &http.Server{Addr: o.listen, Handler: newMux(o, reg, pods, sampler), ReadHeaderTimeout: 10 * time.Second}
	srvErr := make(chan error, 1)
	go func() {
		klog.InfoS("serving", "address", o.listen)
		if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			srvErr <- err
		}
	}()
	err = sample(ctx, stop, o, pods, sampler, srvErr)
	shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shCtx)
	return err
}

// newPodIndex returns the index of the pods of --node-name (every node's when empty),
// read through --kubeconfig; it is not started.
func newPodIndex(o *options) (*agent.PodIndex, error) {
	restCfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	restCfg.UserAgent = "gpufrac-agent"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	pods, err := agent.NewPodIndex(client, o.nodeName)
	if err != nil {
		return nil, err
	}
	if o.nodeName == "" {
		klog.InfoS("no --node-name or $NODE_NAME: watching the pods of every node")
	}
	return pods, nil
}

// newGPUs returns the NVML library the sampler reads and the attribution of its
// processes to pods: with --simulate, fake GPUs replaying --trace (registered on reg,
// advanced before each cycle); otherwise the real NVML and the host's /proc.
func newGPUs(o *options, pods *agent.PodIndex, reg prometheus.Registerer) (nvml.Interface, agent.Attributor, error) {
	if !o.simulate {
		var libOpts []nvml.LibraryOption
		if o.nvmlLibrary != "" {
			libOpts = append(libOpts, nvml.WithLibraryPath(o.nvmlLibrary))
		}
		return nvml.New(libOpts...), &agent.ProcAttributor{ProcRoot: o.procRoot, Pods: pods}, nil
	}
	f, err := os.Open(o.tracePath)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %w", err)
	}
	tr, _, err := trace.ReadLongCSV(f, o.tracePath)
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("--trace: %w", err)
	}
	o.sim.Trace = tr
	sim, err := fakenvml.New(o.sim, pods)
	if err != nil {
		return nil, nil, err
	}
	klog.InfoS("simulating GPUs", "trace", o.tracePath, "summary", tr.Summarize().String(), "gpus", o.sim.GPUs, "speed", o.sim.Speed, "loop", o.sim.Loop)
	o.cfg.BeforeCycle = sim.Advance
	reg.MustRegister(sim)
	return sim.NVML(), sim, nil
}

// newMux serves /metrics from reg, /healthz, and /readyz: ready once the pod informer
// has synced and, with --nvml-required, a sampling cycle has succeeded.
func newMux(o *options, reg *prometheus.Registry, pods *agent.PodIndex, sampler *agent.Sampler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !pods.HasSynced():
			http.Error(w, "pod informer not synced", http.StatusServiceUnavailable)
		case o.cfg.NVMLRequired && !sampler.Sampled():
			http.Error(w, "no sampling cycle has succeeded yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}

// sample starts the pod informer and runs the sampler until ctx ends, the sampler fails
// or the HTTP server fails (srvErr; then stop ends ctx). With --nvml-required it fails
// fast when NVML cannot be initialised, before waiting for the API server.
func sample(ctx context.Context, stop context.CancelFunc, o *options, pods *agent.PodIndex, sampler *agent.Sampler, srvErr <-chan error) error {
	if o.cfg.NVMLRequired {
		if err := sampler.Init(); err != nil {
			return err
		}
	}
	pods.Start(ctx)
	if !pods.WaitForSync(ctx, o.podSyncTimeout) && ctx.Err() == nil {
		klog.ErrorS(nil, "pod informer not synced; sampling anyway (processes show as unknown_pod until it is)", "timeout", o.podSyncTimeout)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- sampler.Run(ctx) }()
	select {
	case err := <-srvErr:
		stop()
		<-runErr
		return err
	case err := <-runErr:
		stop()
		return err
	case <-ctx.Done():
		return <-runErr
	}
}
