// -bench: the whole workload of a file run the way raygate's admission benchmark
// (benches/admission.rs) runs it, so the two can be set side by side in one run. After every
// cycle, each Workload admitted in the cycle before finishes (its Finished condition set, as the
// job reconciler does when the job ends; the workload controller then releases its quota), until
// no Workload is pending or running. What is timed as Kueue's scheduling is its cycle
// (`schedule`) without its writes, which go to the fake client standing in for the API server
// (its plain object tracker here: see newDriver). The writes, the admissions' (run after the cycle instead of in goroutines of
// their own, as Kueue's scheduler lets its routine wrapper decide) and the controllers'
// reactions are timed apart.

package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/workload"
)

// BenchResult is -bench's outcome for one file.
type BenchResult struct {
	File        string `json:"file"`
	Error       string `json:"error,omitempty"`
	Workloads   int    `json:"workloads"`
	Cycles      int    `json:"cycles"`
	Admissions  int    `json:"admissions"`
	Preemptions int    `json:"preemptions"`
	Finished    int    `json:"finished"`
	// LoadSeconds: reading the file and filling the client, cache and queues.
	LoadSeconds float64 `json:"loadSeconds"`
	// ScheduleSeconds: wall time in Kueue's cycles; ScheduleCPUSeconds: the process's CPU time in
	// them (all threads: the garbage collector's too).
	// ScheduleSeconds: wall time in Kueue's cycles without their status writes (the pending
	// heads' messages, the evictions), which are ScheduleWriteSeconds; ScheduleCPUSeconds: the
	// process's CPU time in the cycles, writes included (all threads: the garbage collector's
	// too). AdmissionWriteSeconds: the admissions' status writes, which Kueue makes in goroutines
	// of their own and the driver makes after the cycle.
	ScheduleSeconds       float64 `json:"scheduleSeconds"`
	ScheduleWriteSeconds  float64 `json:"scheduleWriteSeconds"`
	ScheduleCPUSeconds    float64 `json:"scheduleCpuSeconds"`
	AdmissionWriteSeconds float64 `json:"admissionWriteSeconds"`
	// ReactSeconds: the controllers' reactions and the finishing between cycles.
	ReactSeconds float64 `json:"reactSeconds"`
	CycleP50Ms   float64 `json:"cycleP50Ms"`
	CycleP99Ms   float64 `json:"cycleP99Ms"`
	// PeakMiB: the process's peak resident memory (VmHWM) from the end of the load (reset there,
	// after a collection) to the end of the run; 0 when the kernel offers no reset.
	PeakMiB float64 `json:"peakMiB"`
	// LoadedMiB: resident memory at the end of the load, after a collection.
	LoadedMiB float64 `json:"loadedMiB"`
}

func benchFile(file string, maxCycles int) (r BenchResult) {
	r.File = file
	defer func() {
		if p := recover(); p != nil {
			r.Error = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	start := time.Now()
	w, err := readWorld(file)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	d, err := newDriver(w, true)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer d.cancel()
	admissions := &deferred{}
	d.sched.RaygateSetAdmissionRoutineWrapper(admissions)
	r.Workloads = len(w.workloads)
	w = nil
	r.LoadSeconds = time.Since(start).Seconds()
	runtime.GC()
	debug.FreeOSMemory()
	r.LoadedMiB = procStatusMiB("VmRSS")
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	if err := d.bench(&r, admissions, maxCycles); err != nil {
		r.Error = err.Error()
	}
	if reset {
		r.PeakMiB = procStatusMiB("VmHWM")
	}
	return r
}

// bench runs cycles, each followed by the controllers' reactions and the end of the Workloads
// admitted a cycle before, until nothing is pending or running.
func (d *driver) bench(r *BenchResult, admissions *deferred, maxCycles int) error {
	var running []workload.Reference
	var cycles []time.Duration
	for {
		t := time.Now()
		if err := d.react(); err != nil {
			return err
		}
		r.ReactSeconds += time.Since(t).Seconds()
		heads := d.hasHeads()
		if !heads && len(running) == 0 {
			break
		}
		if r.Cycles == maxCycles {
			return fmt.Errorf("not done after %d cycles", maxCycles)
		}
		// with no head, Kueue's cycle would wait for one: only the running Workloads finish
		if heads {
			r.Cycles++
			t, cpu, before := time.Now(), processCPU(), d.writing.Load()
			d.sched.RaygateScheduleOnce(d.ctx)
			took, wrote := time.Since(t), time.Duration(d.writing.Load()-before)
			r.ScheduleCPUSeconds += (processCPU() - cpu).Seconds()
			cycles = append(cycles, took-wrote)
			r.ScheduleWriteSeconds += wrote.Seconds()
			t = time.Now()
			admissions.drain()
			r.AdmissionWriteSeconds += time.Since(t).Seconds()
		}
		d.clock.Step(time.Second)
		t = time.Now()
		if err := d.react(); err != nil {
			return err
		}
		admitted := append([]workload.Reference(nil), d.admitted...)
		for _, key := range running {
			done, err := d.finish(key)
			if err != nil {
				return err
			}
			if done {
				r.Finished++
			}
		}
		running = admitted
		r.Admissions += len(admitted)
		r.ReactSeconds += time.Since(t).Seconds()
	}
	for _, n := range d.evictions {
		r.Preemptions += n
	}
	r.ScheduleSeconds, r.CycleP50Ms, r.CycleP99Ms = summarize(cycles)
	return nil
}

// finish ends a Workload that still holds quota, as the job reconciler does when its job
// succeeds; the workload controller's reaction (react) releases the quota.
func (d *driver) finish(key workload.Reference) (bool, error) {
	ns, name, _ := strings.Cut(string(key), "/")
	wl := &kueue.Workload{}
	if err := d.cl.Get(d.ctx, types.NamespacedName{Namespace: ns, Name: name}, wl); err != nil {
		return false, fmt.Errorf("workload %s: %w", key, err)
	}
	if !workload.HasQuotaReservation(wl) {
		return false, nil
	}
	apimeta.SetStatusCondition(&wl.Status.Conditions, metav1.Condition{Type: kueue.WorkloadFinished,
		Status: metav1.ConditionTrue, Reason: kueue.WorkloadFinishedReasonSucceeded, Message: "done",
		LastTransitionTime: metav1.NewTime(d.clock.Now())})
	return true, d.cl.Status().Update(d.ctx, wl)
}

func summarize(cycles []time.Duration) (total, p50, p99 float64) {
	if len(cycles) == 0 {
		return 0, 0, 0
	}
	for _, c := range cycles {
		total += c.Seconds()
	}
	sort.Slice(cycles, func(i, j int) bool { return cycles[i] < cycles[j] })
	at := func(p float64) float64 {
		i := min(max(int(float64(len(cycles))*p+0.999999), 1), len(cycles))
		return float64(cycles[i-1].Microseconds()) / 1000
	}
	return total, at(0.50), at(0.99)
}

// processCPU is the user and system time of every thread of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatusMiB reads one kB field of /proc/self/status in MiB (0 when unavailable).
func procStatusMiB(field string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kib, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			if err == nil {
				return kib / 1024
			}
		}
	}
	return 0
}

// deferred is the scheduler's routine wrapper under -bench: the admissions' status writes,
// which Kueue starts in goroutines of their own, run after the cycle, one after another, so
// that the cycle's own time is measured without them.
type deferred struct {
	mu  sync.Mutex
	fns []func()
}

func (q *deferred) Run(f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.fns = append(q.fns, f)
}

func (q *deferred) drain() {
	for {
		q.mu.Lock()
		fns := q.fns
		q.fns = nil
		q.mu.Unlock()
		if len(fns) == 0 {
			return
		}
		for _, f := range fns {
			f()
		}
	}
}
