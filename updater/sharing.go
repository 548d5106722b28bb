package updater

import (
	"context"
	"errors"

	gpufracv1 "github.com/gpufrac/gpufrac/api/v1alpha1"
	"github.com/gpufrac/gpufrac/backend"
)

// Shared capacity: workloads on the device-plugin backends (nvidia-timeslicing,
// nvidia-mps) run on one replica of a GPU their GPUSharingPolicy's pool shares N ways.
// A pod the webhook did not place there — created before the plan, on another backend,
// or while the webhook was down — holds a whole GPU (ReadAllocation ignores another
// backend's record), so the decision table sees it far above its recommendation and
// replaces it like any other shrink: non-urgent, so only inside the autoscaler's resize
// windows and through every gate (hysteresis, warm-up, admission lease, budget,
// placement, rate, PodDisruptionBudgets). The webhook writes the replacement onto the
// plan. The plan itself never evicts anything.

// SkipNoSharingPlan: a device-plugin backend's autoscaler whose pods the webhook would
// not place on shared capacity now (no applied plan of the backend's mode selects it, see
// backend.FindSharingPlan): a replacement would come back unchanged, so none is made.
const SkipNoSharingPlan = "no-sharing-plan"

// sharingPlanGate returns SkipNoSharingPlan and why when the plan's backend places pods
// on a device-plugin sharing plan and none applies to its autoscaler; "" otherwise (and
// for every other backend). It lists the policies once per cycle through the backend
// configuration's reader (cmd/updater: the API server).
func (u *Updater) sharingPlanGate(ctx context.Context, cy *cycle, p *plan) (string, string) {
	if _, ok := backend.DevicePluginMode(p.backend); !ok {
		return "", ""
	}
	if !cy.policiesRead {
		cy.policiesRead = true
		cy.policies, cy.policiesErr = backend.ListSharingPolicies(ctx, u.Config.Backend.DevicePlugin.Policies)
	}
	err := cy.policiesErr
	if err == nil {
		_, err = backend.SelectSharingPlan(cy.policies, p.gfa, p.backend)
	}
	if err == nil {
		return "", ""
	}
	msg := err.Error()
	var ue *backend.UnsafeError
	if errors.As(err, &ue) {
		msg = ue.Message
	}
	return SkipNoSharingPlan, msg + ": a replacement would not be placed on shared GPUs"
}

// onOtherBackend reports whether rec was written by another backend than bt while bt
// places pods on device-plugin shared capacity: such a pod is not on the plan's replicas,
// whatever fraction its record says.
func onOtherBackend(rec *gpufracv1.AppliedRecord, bt gpufracv1.BackendType) bool {
	_, onPlan := backend.DevicePluginMode(bt)
	return onPlan && rec.Backend != bt
}
