// Copied by hack/install-kueue.sh into Kueue v0.19.2's pkg/scheduler before the build of
// raygate-kueue-admit (hack/kueue-admit/main.go): the two unexported entry points Kueue's own
// scheduler tests call (scheduler_test.go), so the driver can run one cycle at a time and wait for
// the cycle's admissions, as those tests do. Nothing in Kueue's code changes.

package scheduler

import (
	"context"

	"sigs.k8s.io/kueue/pkg/util/routine"
)

// RaygateScheduleOnce runs one scheduling cycle (Kueue's `schedule`).
func (s *Scheduler) RaygateScheduleOnce(ctx context.Context) {
	s.schedule(ctx)
}

// RaygateSetAdmissionRoutineWrapper lets the caller wait for the cycle's asynchronous admissions.
func (s *Scheduler) RaygateSetAdmissionRoutineWrapper(w routine.Wrapper) {
	s.setAdmissionRoutineWrapper(w)
}
