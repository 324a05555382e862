// Command raygate-kueue-admit runs Kueue v0.19.2's own scheduler, scheduler cache and queue manager
// in one process on a file of Kueue objects — the file `raygate admit` reads — until nothing
// changes, and prints what became of every Workload as one JSON line per file. It is the reference
// side of raygate's admission differential (tests/kueue_differential.rs).
//
// hack/install-kueue.sh copies it (with bench.go, the -bench mode) into Kueue's source tree as
// cmd/raygate-kueue-admit (with export.go into pkg/scheduler) and builds it from the vendored modules, offline.
//
// What runs is Kueue's code: scheduler.New with the manager's options, schdcache.New,
// qcache.NewManager (with the exported requeuer Kueue's scheduler tests use, drained after every
// step), over controller-runtime's fake client (Kueue's own test client builder, SSA status
// patches as strategic merges, as in scheduler_test.go). What the driver does itself is what
// Kueue's controllers would do between cycles, each a port of the code named beside it:
//
//   - the workload controller's update handler (pkg/controller/core/workload_controller.go,
//     WorkloadReconciler.Update): a Workload that got quota leaves the queues for the cache; one
//     that lost it leaves the cache and is requeued (QueueAssociatedInadmissibleWorkloadsAfter);
//     a pending one whose status changed is re-pushed (PushOrUpdate keeps it inadmissible);
//   - the job reconciler's end of an eviction (pkg/controller/jobframework/reconciler.go, "handle
//     a job when waitForPodsReady is enabled, and it is the main job"... the evicted-workload
//     branch): the job is stopped at once, the Requeued condition set (True for a preemption),
//     and the quota reservation unset with reason PendingEvaluation/Pending.
//
// Time is a fake clock starting at the newest creationTimestamp in the file (what `raygate admit`
// stamps with) and advancing one second per cycle. The run stops at a fixed point (no active
// ClusterQueue has a head), at a steady state (admissions unchanged while heads are retried), or
// after -max-cycles cycles (Kueue loops); "settled" in the output says which (driver.run).
//
// Usage: raygate-kueue-admit [-max-cycles N] [-trace] [-bench] [-cpuprofile FILE] FILE...
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	kueuev1beta1 "sigs.k8s.io/kueue/apis/kueue/v1beta1"
	kueue "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	"sigs.k8s.io/kueue/pkg/util/routine"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"
	"sigs.k8s.io/kueue/pkg/workload"
	workloadevict "sigs.k8s.io/kueue/pkg/workload/evict"
)

var trace bool

// Result is one file's outcome.
type Result struct {
	File  string `json:"file"`
	Error string `json:"error,omitempty"`
	// Settled is how the run ended: "quiet", "steady" or "loops" (driver.run).
	Settled string `json:"settled"`
	// Retrying: when steady, the ClusterQueues whose heads Kueue still retries every cycle.
	Retrying  []string      `json:"retrying,omitempty"`
	Cycles    int           `json:"cycles"`
	Workloads []WorkloadRow `json:"workloads"`
}

// WorkloadRow is what became of one Workload.
type WorkloadRow struct {
	Name         string                       `json:"name"`
	Admitted     bool                         `json:"admitted"`
	ClusterQueue string                       `json:"clusterQueue,omitempty"`
	Flavors      map[string]map[string]string `json:"flavors"`
	Evictions    int                          `json:"evictions"`
}

func main() {
	maxCycles := flag.Int("max-cycles", 500, "cycles before a run counts as looping (with -bench: before it gives up)")
	flag.BoolVar(&trace, "trace", false, "print the queues and the Workloads' states before every cycle to stderr")
	bench := flag.Bool("bench", false, "run the whole workload as raygate's admission benchmark does and print its figures (bench.go)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	flag.Parse()
	ctrl.SetLogger(logr.Discard())
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for _, file := range flag.Args() {
		var r any
		if *bench {
			r = benchFile(file, *maxCycles)
		} else {
			r = runFile(file, *maxCycles)
		}
		if err := enc.Encode(r); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

func runFile(file string, maxCycles int) (r Result) {
	r.File = file
	defer func() {
		if p := recover(); p != nil {
			r.Error = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	w, err := readWorld(file)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	d, err := newDriver(w, false)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer d.cancel()
	settled, cycles, err := d.run(maxCycles)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Settled, r.Cycles = settled, cycles
	if settled == "steady" {
		r.Retrying = d.retrying()
	}
	r.Workloads, err = d.rows()
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// world is the objects of one file.
type world struct {
	namespaces []corev1.Namespace
	flavors    []kueue.ResourceFlavor
	cohorts    []kueue.Cohort
	cqs        []kueue.ClusterQueue
	lqs        []kueue.LocalQueue
	classes    []kueue.WorkloadPriorityClass
	workloads  []kueue.Workload
	now        time.Time
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(kueue.AddToScheme(s))
	return s
}

func readWorld(file string) (*world, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	decode := serializer.NewCodecFactory(newScheme()).UniversalDeserializer().Decode
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	w := &world{}
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if err := w.add(obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
	}
	return w, nil
}

func (w *world) add(obj runtime.Object) error {
	switch o := obj.(type) {
	case *corev1.Namespace:
		w.namespaces = append(w.namespaces, *o)
	case *kueue.ResourceFlavor:
		w.flavors = append(w.flavors, *o)
	case *kueue.Cohort:
		w.cohorts = append(w.cohorts, *o)
	case *kueue.ClusterQueue:
		w.cqs = append(w.cqs, *o)
	case *kueue.LocalQueue:
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		w.lqs = append(w.lqs, *o)
	case *kueue.WorkloadPriorityClass:
		w.classes = append(w.classes, *o)
	case *kueue.Workload:
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		if o.CreationTimestamp.Time.After(w.now) {
			w.now = o.CreationTimestamp.Time
		}
		w.workloads = append(w.workloads, *o)
	default:
		return fmt.Errorf("unsupported kind %T", obj)
	}
	return nil
}

// driver holds one world's Kueue: client, cache, queues, scheduler, and the Workloads as the
// controllers last saw them.
type driver struct {
	ctx       context.Context
	cancel    context.CancelFunc
	log       logr.Logger
	clock     *testingclock.FakeClock
	cl        client.Client
	cache     *schdcache.Cache
	queues    *qcache.Manager
	requeuer  interface{ ProcessRequeues(context.Context) int }
	sched     *scheduler.Scheduler
	wg        *sync.WaitGroup
	seen      map[workload.Reference]*kueue.Workload
	evictions map[workload.Reference]int
	// dirty: the Workloads written since the controllers last looked (all of them when allDirty),
	// so react reads only what changed, as the controllers' watches would.
	dirtyMu  sync.Mutex
	dirty    map[types.NamespacedName]bool
	allDirty bool
	// writing: the time spent in the client's writes (-bench tells it apart from the cycles').
	writing atomic.Int64
	// admitted: the Workloads that got quota in the last react.
	admitted []workload.Reference
	// steadyCycles: cycles without a change of admissions after which retries count as steady
	// (three times the Workloads, at least 30: more than a full round of every queue's heads).
	steadyCycles int
}

// newDriver builds the world's Kueue. plain: the fake client keeps its objects in client-go's
// plain object tracker instead of the field-managed one Kueue's tests use (which builds a REST
// mapper on every write: most of a cycle's time on large worlds); -bench uses it, since its
// patches are strategic merges either way.
func newDriver(w *world, plain bool) (*driver, error) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &driver{ctx: ctx, cancel: cancel, log: logr.Discard(), wg: &sync.WaitGroup{},
		clock: testingclock.NewFakeClock(w.now), seen: map[workload.Reference]*kueue.Workload{},
		evictions: map[workload.Reference]int{}, steadyCycles: max(30, 3*len(w.workloads)),
		dirty: map[types.NamespacedName]bool{}, allDirty: true}
	objs := []client.Object{}
	for i := range w.namespaces {
		objs = append(objs, &w.namespaces[i])
	}
	if len(w.namespaces) == 0 {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
	}
	for _, list := range [][]client.Object{ptrs(w.flavors), ptrs(w.cohorts), ptrs(w.cqs), ptrs(w.lqs), ptrs(w.classes)} {
		objs = append(objs, list...)
	}
	for i := range w.workloads {
		resolvePriority(&w.workloads[i], w.classes)
		if w.workloads[i].UID == "" {
			w.workloads[i].UID = types.UID(w.workloads[i].Namespace + "/" + w.workloads[i].Name)
		}
		objs = append(objs, &w.workloads[i])
	}
	b := utiltesting.NewClientBuilder()
	if plain {
		s := newScheme()
		utilruntime.Must(kueuev1beta1.AddToScheme(s))
		b = b.WithScheme(s).WithObjectTracker(clienttesting.NewObjectTracker(s, serializer.NewCodecFactory(s).UniversalDecoder()))
	}
	d.cl = b.WithObjects(objs...).
		WithStatusSubresource(&kueue.Workload{}, &kueue.ClusterQueue{}, &kueue.LocalQueue{}).
		WithInterceptorFuncs(d.writes()).
		Build()
	d.cache = schdcache.New(d.cl)
	expectations := preemptexpectations.New()
	queues, requeuer := qcache.NewManagerForUnitTestsWithRequeuer(d.cl, d.cache,
		qcache.WithPreemptionExpectations(expectations))
	d.queues, d.requeuer = queues, requeuer
	go d.queues.CleanUpOnContext(ctx)
	if err := d.load(w); err != nil {
		cancel()
		return nil, err
	}
	d.sched = scheduler.New(d.queues, d.cache, d.cl, &utiltesting.EventRecorder{},
		scheduler.WithClock(nil, d.clock), scheduler.WithPreemptionExpectations(expectations))
	d.sched.RaygateSetAdmissionRoutineWrapper(routine.NewWrapper(func() { d.wg.Add(1) }, func() { d.wg.Done() }))
	return d, nil
}

func ptrs[T any, P interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, 0, len(items))
	for i := range items {
		out = append(out, P(&items[i]))
	}
	return out
}

// resolvePriority sets spec.priority from the WorkloadPriorityClass when only the class is named,
// as Kueue's job framework does when it creates a Workload.
func resolvePriority(wl *kueue.Workload, classes []kueue.WorkloadPriorityClass) {
	if wl.Spec.Priority != nil || wl.Spec.PriorityClassRef == nil {
		return
	}
	for i := range classes {
		if classes[i].Name == wl.Spec.PriorityClassRef.Name {
			v := classes[i].Value
			wl.Spec.Priority = &v
		}
	}
}

// load adds the objects to the cache and queues in the order the manager's controllers' initial
// lists would (flavors and cohorts, then ClusterQueues, LocalQueues, then Workloads).
func (d *driver) load(w *world) error {
	for i := range w.flavors {
		d.cache.AddOrUpdateResourceFlavor(d.log, &w.flavors[i])
	}
	for i := range w.cohorts {
		if err := d.cache.AddOrUpdateCohort(&w.cohorts[i]); err != nil {
			return fmt.Errorf("cohort %s: %w", w.cohorts[i].Name, err)
		}
		d.queues.AddOrUpdateCohort(d.ctx, &w.cohorts[i])
	}
	for i := range w.cqs {
		if err := d.cache.AddClusterQueue(d.ctx, &w.cqs[i]); err != nil {
			return fmt.Errorf("clusterqueue %s: %w", w.cqs[i].Name, err)
		}
		if err := d.queues.AddClusterQueue(d.ctx, &w.cqs[i]); err != nil {
			return fmt.Errorf("clusterqueue %s: %w", w.cqs[i].Name, err)
		}
	}
	for i := range w.lqs {
		if err := d.queues.AddLocalQueue(d.ctx, &w.lqs[i]); err != nil {
			return fmt.Errorf("localqueue %s: %w", w.lqs[i].Name, err)
		}
	}
	list := &kueue.WorkloadList{}
	if err := d.cl.List(d.ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		wl := &list.Items[i]
		if workload.HasQuotaReservation(wl) {
			d.cache.AddOrUpdateWorkload(d.log, wl.DeepCopy())
		} else if workload.IsActive(wl) {
			_ = d.queues.AddOrUpdateWorkload(d.log, wl.DeepCopy())
		}
		d.seen[workload.Key(wl)] = wl.DeepCopy()
	}
	return nil
}

// run alternates Kueue's cycles with the controllers' reactions until no active ClusterQueue has
// a head ("quiet"), or until the Workloads' admissions have not changed for steadyCycles cycles
// while some head keeps being retried ("steady": with FlavorFungibilityPreserveScanProgress, on by
// default in v0.19, a Workload whose flavor scan has flavors left is requeued at once, and one
// that can never fit is retried every cycle without end), or until maxCycles ("loops": admissions
// still change).
func (d *driver) run(maxCycles int) (string, int, error) {
	last, unchanged := "", 0
	for cycle := 0; ; cycle++ {
		if err := d.react(); err != nil {
			return "", cycle, err
		}
		if !d.hasHeads() {
			if trace {
				d.trace(cycle)
			}
			return "quiet", cycle, nil
		}
		state, err := d.fingerprint()
		if err != nil {
			return "", cycle, err
		}
		if state == last {
			unchanged++
		} else {
			last, unchanged = state, 0
		}
		if unchanged >= d.steadyCycles {
			return "steady", cycle, nil
		}
		if cycle == maxCycles {
			return "loops", cycle, nil
		}
		if trace {
			d.trace(cycle)
		}
		d.sched.RaygateScheduleOnce(d.ctx)
		d.wg.Wait()
		d.clock.Step(time.Second)
	}
}

// fingerprint is every Workload's admission (queue and flavors) and eviction count.
func (d *driver) fingerprint() (string, error) {
	rows, err := d.rows()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(rows)
	return string(b), err
}

// retrying is the active ClusterQueues with Workloads in their heaps.
func (d *driver) retrying() []string {
	out := []string{}
	for cq, wls := range d.queues.Dump() {
		if len(wls) > 0 && d.cache.ClusterQueueActive(cq) {
			out = append(out, string(cq))
		}
	}
	sort.Strings(out)
	return out
}

func (d *driver) hasHeads() bool {
	for cq, wls := range d.queues.Dump() {
		if len(wls) > 0 && d.cache.ClusterQueueActive(cq) {
			return true
		}
	}
	return false
}

// writes marks every Workload the scheduler or the driver writes as dirty; a write whose object
// it cannot name marks them all. Status patches are SSA patches applied as strategic merges, as
// in Kueue's scheduler tests.
func (d *driver) writes() interceptor.Funcs {
	mark := func(obj client.Object, start time.Time) {
		d.writing.Add(int64(time.Since(start)))
		d.dirtyMu.Lock()
		defer d.dirtyMu.Unlock()
		if _, ok := obj.(*kueue.Workload); ok {
			d.dirty[client.ObjectKeyFromObject(obj)] = true
		} else {
			d.allDirty = true
		}
	}
	all := func(start time.Time) {
		d.writing.Add(int64(time.Since(start)))
		d.dirtyMu.Lock()
		defer d.dirtyMu.Unlock()
		d.allDirty = true
	}
	return interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			defer mark(obj, time.Now())
			return utiltesting.TreatSSAAsStrategicMerge(ctx, c, sub, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			defer mark(obj, time.Now())
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourceApply: func(ctx context.Context, c client.Client, sub string, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			defer all(time.Now())
			return c.SubResource(sub).Apply(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			defer mark(obj, time.Now())
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			defer mark(obj, time.Now())
			return c.Patch(ctx, obj, p, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			defer all(time.Now())
			return c.Apply(ctx, obj, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			defer mark(obj, time.Now())
			return c.Create(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			defer all(time.Now())
			return c.Delete(ctx, obj, opts...)
		},
	}
}

// changed is the Workloads written since the last call, in the order a List returns them
// (namespace, name); everything when a write could not be traced to one Workload.
func (d *driver) changed() ([]kueue.Workload, error) {
	d.dirtyMu.Lock()
	keys, all := d.dirty, d.allDirty
	d.dirty, d.allDirty = map[types.NamespacedName]bool{}, false
	d.dirtyMu.Unlock()
	if all {
		list := &kueue.WorkloadList{}
		err := d.cl.List(d.ctx, list)
		return list.Items, err
	}
	names := make([]types.NamespacedName, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if names[i].Namespace != names[j].Namespace {
			return names[i].Namespace < names[j].Namespace
		}
		return names[i].Name < names[j].Name
	})
	out := make([]kueue.Workload, 0, len(names))
	for _, k := range names {
		wl := kueue.Workload{}
		if err := d.cl.Get(d.ctx, k, &wl); err != nil {
			return nil, fmt.Errorf("workload %s: %w", k, err)
		}
		out = append(out, wl)
	}
	return out, nil
}

// react delivers the Workloads' changes to the controllers until none is left.
func (d *driver) react() error {
	d.admitted = d.admitted[:0]
	for round := 0; round < 100; round++ {
		items, err := d.changed()
		if err != nil {
			return err
		}
		changed := false
		for i := range items {
			wl := &items[i]
			key := workload.Key(wl)
			old := d.seen[key]
			if old != nil && old.ResourceVersion == wl.ResourceVersion {
				continue
			}
			changed = true
			d.seen[key] = wl.DeepCopy()
			if old != nil {
				d.workloadUpdated(old, wl.DeepCopy())
			}
			if err := d.finishEviction(wl); err != nil {
				return err
			}
		}
		d.requeuer.ProcessRequeues(d.ctx)
		if !changed {
			return nil
		}
	}
	return errors.New("the controllers did not settle after 100 rounds")
}

// workloadUpdated is WorkloadReconciler.Update for the transitions the scheduler and the job
// reconciler make here.
func (d *driver) workloadUpdated(old, wl *kueue.Workload) {
	prev, now := workload.Status(old), workload.Status(wl)
	key := workload.Key(wl)
	switch {
	case prev == workload.StatusPending && now == workload.StatusPending:
		_ = d.queues.AddOrUpdateWorkload(d.log, wl)
	case now == workload.StatusFinished:
		d.queues.DeleteWorkload(d.log, key)
		d.queues.QueueAssociatedInadmissibleWorkloadsAfter(d.ctx, key, func() {
			_ = d.cache.DeleteWorkload(d.log, key)
		})
	case prev == workload.StatusPending && (now == workload.StatusQuotaReserved || now == workload.StatusAdmitted):
		d.queues.DeleteWorkload(d.log, key)
		d.cache.AddOrUpdateWorkload(d.log, wl)
		d.admitted = append(d.admitted, key)
	case workload.FromQuotaReservedOrAdmittedToPending(prev, now):
		immediate := wl.Status.RequeueState == nil || wl.Status.RequeueState.RequeueAt == nil ||
			!wl.Status.RequeueState.RequeueAt.Time.After(d.clock.Now())
		d.queues.QueueAssociatedInadmissibleWorkloadsAfter(d.ctx, key, func() {
			_ = d.cache.DeleteWorkload(d.log, key)
			if immediate {
				_ = d.queues.AddOrUpdateWorkloadWithoutLock(d.log, wl)
				d.queues.DeleteSecondPassWithoutLock(key)
			}
		})
	default:
		d.cache.AddOrUpdateWorkload(d.log, wl)
	}
}

// finishEviction is the job reconciler's end of an eviction: the job stops at once, so the
// Workload is requeued and its quota released.
func (d *driver) finishEviction(wl *kueue.Workload) error {
	if !workloadevict.IsEvicted(wl) || !workload.HasQuotaReservation(wl) {
		return nil
	}
	ev := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadEvicted)
	d.evictions[workload.Key(wl)]++
	wl = wl.DeepCopy()
	requeued := ev.Reason == kueue.WorkloadEvictedByPreemption || ev.Reason == kueue.WorkloadEvictedDueToNodeFailures
	workload.SetRequeuedCondition(wl, ev.Reason, ev.Message, requeued)
	reason := workload.UnadmittedWorkloadReasonWithFallback(kueue.WorkloadQuotaReservedReasonPendingEvaluation,
		kueue.WorkloadPending) //nolint:staticcheck // the fallback Kueue's reconciler uses
	workload.UnsetQuotaReservationWithCondition(wl, reason, ev.Message, d.clock.Now())
	return d.cl.Status().Update(d.ctx, wl)
}

func (d *driver) rows() ([]WorkloadRow, error) {
	list := &kueue.WorkloadList{}
	if err := d.cl.List(d.ctx, list); err != nil {
		return nil, err
	}
	rows := make([]WorkloadRow, 0, len(list.Items))
	for i := range list.Items {
		wl := &list.Items[i]
		key := workload.Key(wl)
		row := WorkloadRow{Name: wl.Namespace + "/" + wl.Name, Flavors: map[string]map[string]string{},
			Evictions: d.evictions[key]}
		if workload.HasQuotaReservation(wl) && wl.Status.Admission != nil {
			row.Admitted = true
			row.ClusterQueue = string(wl.Status.Admission.ClusterQueue)
			for _, psa := range wl.Status.Admission.PodSetAssignments {
				m := map[string]string{}
				for res, fl := range psa.Flavors {
					m[string(res)] = string(fl)
				}
				row.Flavors[string(psa.Name)] = m
			}
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

func (d *driver) trace(cycle int) {
	fmt.Fprintf(os.Stderr, "cycle %d at %s: active %v inadmissible %v\n", cycle,
		d.clock.Now().Format(time.RFC3339), d.queues.Dump(), d.queues.DumpInadmissible())
	rows, _ := d.rows()
	why := map[string]string{}
	list := &kueue.WorkloadList{}
	if err := d.cl.List(d.ctx, list); err == nil {
		for i := range list.Items {
			wl := &list.Items[i]
			if c := apimeta.FindStatusCondition(wl.Status.Conditions, kueue.WorkloadQuotaReserved); c != nil && c.Status == metav1.ConditionFalse {
				why[wl.Namespace+"/"+wl.Name] = c.Message
			}
		}
	}
	for _, r := range rows {
		fmt.Fprintf(os.Stderr, "  %s admitted=%v %s %v evictions=%d %s\n", r.Name, r.Admitted, r.ClusterQueue, r.Flavors, r.Evictions, why[r.Name])
	}
}
