package admission

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/gpufrac/gpufrac/backend"
	"github.com/gpufrac/gpufrac/contract"
)

// Config holds what the mutating webhook needs to decide and write a fraction: its own
// settings and the backends' (backend.Config, embedded). The zero value plus
// WithDefaults is a usable configuration; cmd/admission maps flags onto it with
// AddFlags.
type Config struct {
	// MinConfidence is the lowest recommendation confidence (status.confidencePercent,
	// 0–100) that is applied (contract.Applies); 0 applies any recommendation. Nil means
	// contract.DefaultMinConfidence (50).
	MinConfidence *int32
	// OwnerWait is how long the mutating webhook waits for a pod's ReplicaSet or Job to
	// appear in the informer cache (it may have been created a moment before the pod).
	// The wait polls the cache only; no API request is made. Default 200ms.
	OwnerWait time.Duration
	// Config configures the backends: GPU resource names, the memory of one GPU, the
	// per-backend memory overheads and each backend's section.
	backend.Config
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.MinConfidence == nil {
		c.MinConfidence = ptrTo(contract.DefaultMinConfidence)
	}
	if c.OwnerWait == 0 {
		c.OwnerWait = 200 * time.Millisecond
	}
	c.Config = c.Config.WithDefaults()
	return c
}

// minConfidence is MinConfidence or its default.
func (c Config) minConfidence() int32 { return contract.MinConfidence(c.MinConfidence) }

// Validate reports every setting that cannot work, joined.
func (c Config) Validate() error {
	errs := []error{contract.ValidateMinConfidence(c.MinConfidence)}
	if c.OwnerWait < 0 {
		errs = append(errs, fmt.Errorf("--owner-wait %v: want ≥ 0", c.OwnerWait))
	}
	return errors.Join(append(errs, c.Config.Validate())...)
}

// AddFlags registers the mutating webhook's flags on fs, writing into c: its own and
// the backends' (backend.Config.AddFlags). Call WithDefaults after parsing for the
// fields left empty.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	d := Config{}.WithDefaults()
	fs.Func("min-confidence", fmt.Sprintf("Lowest recommendation confidence applied to new pods, percent 0–100; 0 applies any (default %d).", *d.MinConfidence), func(s string) error {
		v, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return err
		}
		c.MinConfidence = ptrTo(int32(v))
		return nil
	})
	fs.DurationVar(&c.OwnerWait, "owner-wait", d.OwnerWait, "How long to wait for a new pod's ReplicaSet or Job to reach the informer cache (cache polling only, no API request).")
	c.Config.AddFlags(fs)
}

// TimeoutMargin is the time a pod request keeps, within the webhook timeout the API
// server is given, for what no flag bounds: the call's transport, decoding, the cache
// reads and the patch (milliseconds in practice).
const TimeoutMargin = 250 * time.Millisecond

// LongestWait is the longest one pod request can wait on bounded operations: OwnerWait
// (the cache polling for its ReplicaSet or Job), then the longest backend timeout
// (DRA.Timeout, DevicePlugin.Timeout; a pod is written by one backend).
func (c Config) LongestWait() time.Duration {
	return c.OwnerWait + max(c.DRA.Timeout, c.DevicePlugin.Timeout)
}

// CheckTimeout returns an error naming the flags and their values when LongestWait plus
// TimeoutMargin exceeds timeoutSeconds, the webhook timeout the API server is given
// (--webhook-timeout): the API server would then time the call out before gpufrac's
// own bounds fire, and the pod would be admitted unchanged (failurePolicy Ignore)
// without gpufrac's warning, event or metric. c must have its defaults.
func (c Config) CheckTimeout(timeoutSeconds int32) error {
	limit := time.Duration(timeoutSeconds) * time.Second
	if need := c.LongestWait() + TimeoutMargin; need > limit {
		return fmt.Errorf("--owner-wait %v + the longer of --dra-timeout %v and --device-plugin-timeout %v, plus %v for the request itself, is %v: over --webhook-timeout %d (seconds), "+
			"so the API server would time out the pod webhook first and admit pods unchanged without gpufrac's warning; raise --webhook-timeout (at most %d) or lower those flags",
			c.OwnerWait, c.DRA.Timeout, c.DevicePlugin.Timeout, TimeoutMargin, need, timeoutSeconds, MaxTimeoutSeconds)
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }
