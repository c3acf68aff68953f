package main

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// mode is how the operator caches, finds and writes children.
//
//   - naive: the default cache (every Pod of the cluster, whole), and a List
//     of all of them per reconcile, matched to the DataJob in a loop;
//     writes by Create and Update.
//   - indexed: the Pod cache restricted by label selector to this operator's
//     children, a field index on the controller owner, and a List of one
//     DataJob's Pods through it; writes by Create and Update.
//   - best: indexed, plus slim cached Pods (see slimPod), no managedFields
//     in the cache, server-side apply for children, finalizer and status,
//     and DataJob watch events queued only when the generation changes
//     (spec changes and deletion, not the controller's own status writes).
//
// Every mode uses controller-runtime's priority queue, its default since
// v0.23; best asks for it explicitly.
type mode string

const (
	naive   mode = "naive"
	indexed mode = "indexed"
	best    mode = "best"
)

func parseMode(s string) (mode, error) {
	switch m := mode(s); m {
	case naive, indexed, best:
		return m, nil
	}
	return "", fmt.Errorf("--mode %q: want naive, indexed or best", s)
}

// ownerIndex is the field index of a Pod's controller DataJob UID.
const ownerIndex = ".metadata.controller.uid"

func controllerUID(obj client.Object) []string {
	owner := metav1.GetControllerOf(obj)
	if owner == nil || owner.APIVersion != GroupVersion.String() || owner.Kind != "DataJob" {
		return nil
	}
	return []string{string(owner.UID)}
}

// cacheOptions is what the manager's cache holds in each mode.
func (m mode) cacheOptions(namespaces []string) cache.Options {
	if m == naive {
		return cache.Options{}
	}
	pods := cache.ByObject{Label: labels.SelectorFromSet(labels.Set{managedByLabel: instance})}
	opts := cache.Options{}
	if m == best {
		pods.Transform = slimPod
		opts.DefaultTransform = cache.TransformStripManagedFields()
	}
	opts.ByObject = map[client.Object]cache.ByObject{&corev1.Pod{}: pods}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = make(map[string]cache.Config, len(namespaces))
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// slimPod is what best caches of a Pod: its metadata (without
// managedFields), its phase and its Ready condition; all that fanout reads.
//
// A metadata-only watch (builder.OnlyMetadata) would be slimmer still, but
// it has no status: the phases that fanout counts would then take a live
// GET of every Pod in every reconcile. The API server sends whole Pods
// either way (as protobuf); the transform saves the memory, and the deep
// copies of every List, that the rest of a Pod would cost.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{
		TypeMeta:   pod.TypeMeta,
		ObjectMeta: pod.ObjectMeta,
		Status:     corev1.PodStatus{Phase: pod.Status.Phase},
	}
	slim.ManagedFields = nil
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			slim.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return slim, nil
}

// SetupWithManager registers the controller: DataJobs of the fanout
// policy, and the Pods they control.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, workers int) error {
	if r.mode != naive {
		if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, ownerIndex, controllerUID); err != nil {
			return err
		}
	}
	fanoutOnly := predicate.NewPredicateFuncs(func(obj client.Object) bool {
		job, ok := obj.(*DataJob)
		return ok && job.Spec.Policy == policyName
	})
	forOptions := []builder.ForOption{builder.WithPredicates(fanoutOnly)}
	options := controller.Options{MaxConcurrentReconciles: workers}
	if r.mode == best {
		// Status writes bump no generation: the controller does not queue
		// its own status writes again. Deletion does bump it.
		forOptions = append(forOptions, builder.WithPredicates(predicate.GenerationChangedPredicate{}))
		options.UsePriorityQueue = ptr.To(true)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("fanout").
		For(&DataJob{}, forOptions...).
		Owns(&corev1.Pod{}).
		WithOptions(options).
		Complete(r)
}

// children lists the Pods the DataJob controls, from the cache.
func (r *Reconciler) children(ctx context.Context, job *DataJob) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if r.mode == naive {
		// Every Pod of the cluster, deep-copied out of the cache, then a loop.
		if err := r.List(ctx, &pods); err != nil {
			return nil, err
		}
		var owned []corev1.Pod
		for i := range pods.Items {
			if metav1.IsControlledBy(&pods.Items[i], job) {
				owned = append(owned, pods.Items[i])
			}
		}
		return owned, nil
	}
	err := r.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingFields{ownerIndex: string(job.UID)})
	return pods.Items, err
}

// writeChild creates worker w's Pod, or brings the existing one up to date.
func (r *Reconciler) writeChild(ctx context.Context, job *DataJob, w worker, p params, hash string, existing *corev1.Pod) error {
	if r.mode == best {
		return r.Apply(ctx, w.applyConfiguration(job, p, hash), client.FieldOwner(instance), client.ForceOwnership)
	}
	desired := w.pod(job, p, hash)
	if existing == nil {
		// Already there: created by an earlier pass whose watch event has
		// not reached the cache yet.
		return client.IgnoreAlreadyExists(r.Create(ctx, desired))
	}
	// A Pod's spec is immutable but for a few fields (the image among
	// them): a changed command is refused.
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	maps.Copy(existing.Labels, desired.Labels)
	maps.Copy(existing.Annotations, desired.Annotations)
	for i := range existing.Spec.Containers {
		if c := &existing.Spec.Containers[i]; c.Name == "worker" {
			c.Image, c.Command = p.Image, p.Command
		}
	}
	return r.Update(ctx, existing)
}

// setFinalizer adds (on) or removes the DataJob's finalizer.
func (r *Reconciler) setFinalizer(ctx context.Context, job *DataJob, on bool) error {
	if r.mode == best {
		// The fields this owner applies are its own: applying without the
		// finalizer removes it, and leaves everyone else's alone.
		apply := applyTo(job)
		if on {
			apply.Metadata.Finalizers = []string{finalizer}
		}
		return r.Apply(ctx, apply, client.FieldOwner(instance), client.ForceOwnership)
	}
	if on {
		controllerutil.AddFinalizer(job, finalizer)
	} else {
		controllerutil.RemoveFinalizer(job, finalizer)
	}
	return r.Update(ctx, job)
}

// writeStatus writes the DataJob's status through the status subresource.
func (r *Reconciler) writeStatus(ctx context.Context, job *DataJob, status DataJobStatus) error {
	if r.mode == best {
		apply := applyTo(job)
		apply.Status = &status
		return r.Status().Apply(ctx, apply, client.FieldOwner(instance), client.ForceOwnership)
	}
	job.Status = status
	return r.Status().Update(ctx, job)
}
