package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/recorder"
)

const (
	// policyName: DataJobs of other policies are left alone.
	policyName = "fanout"
	// instance is this operator's managed-by label value and field owner.
	instance = "peers"
	// finalizer holds a DataJob until its workers have stopped.
	finalizer = "peers.policyhost.dev/cleanup"
	// cleanupRetry is how long a deleted DataJob waits for running workers.
	cleanupRetry = 2 * time.Second

	// The labels every child carries, as the project's operator sets them.
	managedByLabel = "policyhost.dev/managed-by"
	dataJobLabel   = "policyhost.dev/datajob"
)

// Reconciler runs fanout DataJobs. Its mode decides how children are
// cached, found and written (modes.go); the logic is the same in all modes.
type Reconciler struct {
	client.Client
	mode     mode
	recorder recorder.EventRecorder
}

// Reconcile brings one DataJob's worker Pods and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	result, err := r.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		// The object changed since the cache saw it: the watch event of
		// the newer version queues the DataJob again.
		return ctrl.Result{}, nil
	}
	return result, err
}

func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	job := &DataJob{}
	if err := r.Get(ctx, req.NamespacedName, job); err != nil {
		// Gone: garbage collection takes its Pods.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if job.Spec.Policy != policyName {
		return ctrl.Result{}, nil
	}
	pods, err := r.children(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !job.DeletionTimestamp.IsZero() {
		return r.cleanup(ctx, job, pods)
	}
	// The finalizer before any child exists.
	if !controllerutil.ContainsFinalizer(job, finalizer) {
		if err := r.setFinalizer(ctx, job, true); err != nil {
			return ctrl.Result{}, err
		}
	}

	// A DataJob that is suspended or has invalid params keeps its phase,
	// message and outputs; only the conditions say why.
	var status DataJobStatus
	job.Status.DeepCopyInto(&status)
	status.ObservedGeneration = job.Generation
	status.Children = countChildren(pods)
	var conditions []metav1.Condition
	var events []event
	params, err := parseParams(job.Spec.Params)
	switch {
	case job.Spec.Suspend:
		conditions = []metav1.Condition{condition("Suspended", true, "SpecSuspend",
			"spec.suspend is true: the policy is not called and no child is created")}
	case err != nil:
		conditions = []metav1.Condition{condition("Ready", false, "InvalidParams", err.Error())}
		events = []event{{corev1.EventTypeWarning, "InvalidParams", err.Error()}}
	default:
		plan := planFanout(job.Name, params, pods)
		summary, err := r.syncChildren(ctx, job, params, plan.workers, pods)
		if err != nil {
			return ctrl.Result{}, err
		}
		status.Phase, status.Message, status.Outputs = plan.phase, plan.message, &plan.outputs
		conditions = []metav1.Condition{summary.ready(len(plan.workers)), plan.workersReady}
		events = plan.events(job.Status.Outputs, params)
	}
	if status.Phase == "" {
		status.Phase = "Pending"
	}
	status.Conditions = stamp(conditions, job.Status.Conditions, job.Generation)

	if equality.Semantic.DeepEqual(job.Status, status) {
		return ctrl.Result{}, nil
	}
	if err := r.writeStatus(ctx, job, status); err != nil {
		return ctrl.Result{}, err
	}
	for _, e := range events {
		r.recorder.Eventf(job, nil, e.kind, e.reason, "Reconcile", "%s", e.note)
	}
	return ctrl.Result{}, nil
}

// cleanup lets a deleted DataJob go once none of its children is pending
// or running; garbage collection then deletes them.
func (r *Reconciler) cleanup(ctx context.Context, job *DataJob, pods []corev1.Pod) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(job, finalizer) {
		return ctrl.Result{}, nil
	}
	for i := range pods {
		if active(&pods[i]) {
			return ctrl.Result{RequeueAfter: cleanupRetry}, nil
		}
	}
	return ctrl.Result{}, r.setFinalizer(ctx, job, false)
}

// syncSummary is what one pass over the children did.
type syncSummary struct {
	applied, unchanged, pruned int
	terminating                []string
}

// syncChildren writes the workers that are missing or out of date, and
// deletes the DataJob's other Pods.
func (r *Reconciler) syncChildren(ctx context.Context, job *DataJob, p params, workers []worker, pods []corev1.Pod) (syncSummary, error) {
	var s syncSummary
	hash := p.templateHash()
	existing := make(map[string]*corev1.Pod, len(pods))
	for i := range pods {
		existing[pods[i].Name] = &pods[i]
	}
	wanted := make(map[string]bool, len(workers))
	for _, w := range workers {
		name := w.name(job.Name)
		wanted[name] = true
		pod := existing[name]
		switch {
		case pod != nil && !pod.DeletionTimestamp.IsZero():
			// Created again once it is gone: its delete event queues the DataJob.
			s.terminating = append(s.terminating, name)
		case pod != nil && pod.Annotations[templateHashAnnotation] == hash:
			s.unchanged++
		default:
			if err := r.writeChild(ctx, job, w, p, hash, pod); err != nil {
				return s, fmt.Errorf("pod %s: %w", name, err)
			}
			s.applied++
		}
	}
	for i := range pods {
		pod := &pods[i]
		if wanted[pod.Name] || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		// The UID precondition never deletes a Pod that took the name since.
		err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return s, fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		s.pruned++
	}
	return s, nil
}

// ready is the Ready condition after a pass: true unless a wanted Pod is
// still being deleted.
func (s syncSummary) ready(wanted int) metav1.Condition {
	counts := fmt.Sprintf("%d children desired: %d applied, %d unchanged, %d pruned",
		wanted, s.applied, s.unchanged, s.pruned)
	if len(s.terminating) == 0 {
		return condition("Ready", true, "Reconciled", counts)
	}
	more := ""
	if n := len(s.terminating) - 1; n > 0 {
		more = fmt.Sprintf(" (and %d more)", n)
	}
	return condition("Ready", false, "ChildTerminating", fmt.Sprintf(
		"Pod %s%s is being deleted; created again once it is gone (%s)", s.terminating[0], more, counts))
}

// stamp sets each condition's generation, and its transition time: kept
// from the current condition of its type while the status is the same.
func stamp(conditions, current []metav1.Condition, generation int64) []metav1.Condition {
	now := metav1.Now()
	for i := range conditions {
		c := &conditions[i]
		c.ObservedGeneration = generation
		c.LastTransitionTime = now
		if old := apimeta.FindStatusCondition(current, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return conditions
}

// countChildren counts the DataJob's Pods by phase (Unknown as pending).
func countChildren(pods []corev1.Pod) *ChildCounts {
	counts := &ChildCounts{Total: int64(len(pods))}
	for i := range pods {
		switch phaseOf(&pods[i]) {
		case corev1.PodRunning:
			counts.Running++
		case corev1.PodSucceeded:
			counts.Succeeded++
		case corev1.PodFailed:
			counts.Failed++
		default:
			counts.Pending++
		}
	}
	return counts
}
