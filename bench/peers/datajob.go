package main

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// The DataJob API of deploy/crd.yaml, written by hand: the fields a
// controller needs, and every spec field, so that an Update sends the spec
// back whole.

// GroupVersion is the DataJob's API group and version.
var GroupVersion = schema.GroupVersion{Group: "policyhost.dev", Version: "v1alpha1"}

var schemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

// AddToScheme registers DataJob and DataJobList.
var AddToScheme = schemeBuilder.AddToScheme

func init() {
	schemeBuilder.Register(&DataJob{}, &DataJobList{})
}

// DataJob is a unit of work run by a policy.
type DataJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DataJobSpec   `json:"spec"`
	Status DataJobStatus `json:"status,omitempty"`
}

// DataJobSpec names the policy and hands it its params.
type DataJobSpec struct {
	Policy  string          `json:"policy"`
	Params  json.RawMessage `json:"params,omitempty"`
	Suspend bool            `json:"suspend,omitempty"`
	Cleanup *CleanupSpec    `json:"cleanup,omitempty"`
}

// CleanupSpec is the budget of cleanup on deletion (read by the project's
// operator; kept here so that updates do not drop it).
type CleanupSpec struct {
	MaxAttempts    *int64 `json:"maxAttempts,omitempty"`
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
}

// DataJobStatus is what the controller reports about a DataJob.
type DataJobStatus struct {
	Phase              string             `json:"phase,omitempty"`
	Message            string             `json:"message,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Children           *ChildCounts       `json:"children,omitempty"`
	Outputs            *Outputs           `json:"outputs,omitempty"`
}

// ChildCounts counts a DataJob's children by phase.
type ChildCounts struct {
	Total     int64 `json:"total"`
	Pending   int64 `json:"pending"`
	Running   int64 `json:"running"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
}

// Outputs are the fanout policy's status.outputs: the worker Pods by phase.
type Outputs struct {
	Phase     string `json:"phase"`
	Desired   int64  `json:"desired"`
	Pending   int64  `json:"pending"`
	Running   int64  `json:"running"`
	Succeeded int64  `json:"succeeded"`
	Failed    int64  `json:"failed"`
}

// DataJobList is a list of DataJobs.
type DataJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []DataJob `json:"items"`
}

// DeepCopyInto copies the DataJob into out.
func (in *DataJob) DeepCopyInto(out *DataJob) {
	*out = *in
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	in.Spec.DeepCopyInto(&out.Spec)
	in.Status.DeepCopyInto(&out.Status)
}

// DeepCopy copies the DataJob.
func (in *DataJob) DeepCopy() *DataJob {
	if in == nil {
		return nil
	}
	out := new(DataJob)
	in.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (in *DataJob) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

// DeepCopyInto copies the spec into out.
func (in *DataJobSpec) DeepCopyInto(out *DataJobSpec) {
	*out = *in
	if in.Params != nil {
		out.Params = append(json.RawMessage(nil), in.Params...)
	}
	if in.Cleanup != nil {
		out.Cleanup = &CleanupSpec{
			MaxAttempts:    copyOf(in.Cleanup.MaxAttempts),
			TimeoutSeconds: copyOf(in.Cleanup.TimeoutSeconds),
		}
	}
}

// DeepCopyInto copies the status into out.
func (in *DataJobStatus) DeepCopyInto(out *DataJobStatus) {
	*out = *in
	if in.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(in.Conditions))
		for i := range in.Conditions {
			in.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	out.Children = copyOf(in.Children)
	out.Outputs = copyOf(in.Outputs)
}

// copyOf returns a pointer to a copy of *p, or nil.
func copyOf[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// DeepCopyInto copies the list into out.
func (in *DataJobList) DeepCopyInto(out *DataJobList) {
	*out = *in
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]DataJob, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopyObject implements runtime.Object.
func (in *DataJobList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(DataJobList)
	in.DeepCopyInto(out)
	return out
}

// dataJobApply is a server-side apply configuration of a DataJob holding
// only what this controller owns: its finalizer (on the DataJob) or the
// status (on the status subresource). metadata.uid makes the API server
// refuse the apply if the name now holds another DataJob, or none.
type dataJobApply struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        applyMeta      `json:"metadata"`
	Status          *DataJobStatus `json:"status,omitempty"`
}

type applyMeta struct {
	Name       string    `json:"name"`
	Namespace  string    `json:"namespace"`
	UID        types.UID `json:"uid"`
	Finalizers []string  `json:"finalizers,omitempty"`
}

// applyTo starts an apply configuration of job that owns nothing yet.
func applyTo(job *DataJob) *dataJobApply {
	return &dataJobApply{
		TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "DataJob"},
		Metadata: applyMeta{Name: job.Name, Namespace: job.Namespace, UID: job.UID},
	}
}

// IsApplyConfiguration implements runtime.ApplyConfiguration.
func (a *dataJobApply) IsApplyConfiguration() {}

// GetName, GetNamespace, GetKind and GetAPIVersion let the client find the
// resource to apply to.
func (a *dataJobApply) GetName() *string       { return &a.Metadata.Name }
func (a *dataJobApply) GetNamespace() *string  { return &a.Metadata.Namespace }
func (a *dataJobApply) GetKind() *string       { return &a.Kind }
func (a *dataJobApply) GetAPIVersion() *string { return &a.APIVersion }
