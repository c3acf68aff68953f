package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// standardPrefixes are the families of the standard names. The registry
// also holds the Go runtime's go_* families, which are left out.
var standardPrefixes = []string{
	"controller_runtime_", "workqueue_", "rest_client_", "leader_election_", "process_",
}

// leaseName names the lease of the leader election, the `name` label of
// leader_election_master_status.
const leaseName = "policyhost"

// exerciseTimeout bounds each wait on controller-runtime or client-go.
const exerciseTimeout = 30 * time.Second

// family is one metric family as Prometheus exposes it.
type family struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	Labels []string `json:"labels"`
	// Buckets are a histogram's upper bounds, +Inf left out, each the
	// shortest decimal that reads back as the same float64: as strings, so
	// that a JSON reader's float parsing cannot round them.
	Buckets []string `json:"buckets,omitempty"`
}

// families lists the standard families of controller-runtime's registry.
// A vector family is gathered only once it has a child, so the code paths
// that make them run first, for real: a controller reconciles an event, a
// REST client makes a request, a leader election is won.
func families() ([]family, error) {
	logf.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	// The controller and the elector run until the families are gathered.
	defer cancel()
	if err := reconcileOnce(ctx); err != nil {
		return nil, err
	}
	if err := requestOnce(ctx); err != nil {
		return nil, err
	}
	if err := leadOnce(ctx); err != nil {
		return nil, err
	}
	gathered, err := metrics.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("cannot gather controller-runtime's registry: %w", err)
	}
	var out []family
	for _, mf := range gathered {
		if !slices.ContainsFunc(standardPrefixes, func(p string) bool { return strings.HasPrefix(mf.GetName(), p) }) {
			continue
		}
		f := family{
			Name:   mf.GetName(),
			Type:   strings.ToLower(mf.GetType().String()),
			Labels: []string{},
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(f.Labels, l.GetName()) {
					f.Labels = append(f.Labels, l.GetName())
				}
			}
			if h := m.GetHistogram(); h != nil && f.Buckets == nil {
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						f.Buckets = append(f.Buckets, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
					}
				}
			}
		}
		slices.Sort(f.Labels)
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b family) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// reconcileOnce runs a controller named datajob, with controller-runtime's
// default work queue, on one event, and returns once the queue has timed
// the item's processing: the reconciler has returned success and the
// controller has counted and timed it.
func reconcileOnce(ctx context.Context) error {
	ctrl, err := controller.NewUnmanaged("datajob", controller.Options{
		Reconciler: reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, nil
		}),
	})
	if err != nil {
		return fmt.Errorf("cannot make the datajob controller: %w", err)
	}
	events := make(chan event.GenericEvent, 1)
	if err := ctrl.Watch(source.Channel(events, &handler.EnqueueRequestForObject{})); err != nil {
		return fmt.Errorf("cannot watch the event channel: %w", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- ctrl.Start(ctx) }()
	events <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policyhost.dev/v1alpha1", Kind: "DataJob"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sample"},
	}}
	deadline := time.NewTimer(exerciseTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		gathered, err := metrics.Registry.Gather()
		if err != nil {
			return fmt.Errorf("cannot gather controller-runtime's registry: %w", err)
		}
		if count(gathered, "controller_runtime_reconcile_total", "result", "success") >= 1 &&
			count(gathered, "workqueue_work_duration_seconds", "controller", "datajob") >= 1 {
			return nil
		}
		select {
		case err := <-stopped:
			return fmt.Errorf("the datajob controller stopped before it reconciled: %v", err)
		case <-deadline.C:
			return fmt.Errorf("the datajob controller did not reconcile its event within %s", exerciseTimeout)
		case <-tick.C:
		}
	}
}

// count sums the counters, or the histograms' sample counts, of family
// name whose label has the value.
func count(gathered []*dto.MetricFamily, name, label, value string) float64 {
	var sum float64
	for _, mf := range gathered {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return l.GetName() == label && l.GetValue() == value
			}) {
				continue
			}
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// requestOnce makes one request through client-go's REST client to a local
// server, which counts it in rest_client_requests_total.
func requestOnce(ctx context.Context) error {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"major":"1","minor":"37","gitVersion":"v1.37.2"}`)
	}))
	defer server.Close()
	clientset, err := kubernetes.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		return fmt.Errorf("cannot make a client for %s: %w", server.URL, err)
	}
	ctx, cancel := context.WithTimeout(ctx, exerciseTimeout)
	defer cancel()
	if _, err := clientset.CoreV1().RESTClient().Get().AbsPath("/version").DoRaw(ctx); err != nil {
		return fmt.Errorf("cannot get %s/version: %w", server.URL, err)
	}
	return nil
}

// leadOnce runs client-go's leader election on a lock in memory until it
// leads, which sets leader_election_master_status{name=leaseName}. The
// elector keeps leading until ctx ends.
func leadOnce(ctx context.Context) error {
	leading := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          &memoryLock{},
		Name:          leaseName,
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		return fmt.Errorf("cannot make the leader elector: %w", err)
	}
	go elector.Run(ctx)
	select {
	case <-leading:
		return nil
	case <-time.After(exerciseTimeout):
		return fmt.Errorf("the leader elector did not lead within %s", exerciseTimeout)
	}
}

// memoryLock is a resourcelock.Interface that keeps the record in memory,
// as the API server keeps a Lease.
type memoryLock struct {
	mu     sync.Mutex
	record *resourcelock.LeaderElectionRecord
	raw    []byte
}

var leases = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (l *memoryLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return nil, nil, apierrors.NewNotFound(leases, leaseName)
	}
	record := *l.record
	return &record, l.raw, nil
}

func (l *memoryLock) Create(_ context.Context, record resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record != nil {
		return apierrors.NewAlreadyExists(leases, leaseName)
	}
	return l.store(record)
}

func (l *memoryLock) Update(_ context.Context, record resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.record == nil {
		return apierrors.NewNotFound(leases, leaseName)
	}
	return l.store(record)
}

func (l *memoryLock) store(record resourcelock.LeaderElectionRecord) error {
	raw, err := json.Marshal(record)
	if err != nil {
		return err
	}
	l.record, l.raw = &record, raw
	return nil
}

func (l *memoryLock) RecordEvent(string) {}

func (l *memoryLock) Identity() string { return "standard-metrics" }

func (l *memoryLock) Describe() string { return "memory/" + leaseName }
