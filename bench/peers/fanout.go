package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

// The fanout policy (policies/fanout) in Go: a DataJob runs as N worker
// Pods; a failed worker is replaced until more than backoffLimit failed.

const (
	maxReplicas     = 1000
	maxBackoffLimit = 1000

	// templateHashAnnotation holds a hash of the params a worker Pod was
	// written from, so that an unchanged Pod is not written again.
	templateHashAnnotation = "peers.policyhost.dev/template-hash"
)

// params is spec.params of a fanout DataJob.
type params struct {
	Replicas       uint32            `json:"replicas"`
	Image          string            `json:"image"`
	Command        []string          `json:"command"`
	BackoffLimit   uint32            `json:"backoffLimit"`
	PodAnnotations map[string]string `json:"podAnnotations"`
}

// parseParams decodes and checks spec.params; unknown fields are refused.
func parseParams(raw json.RawMessage) (params, error) {
	p := params{Replicas: 1, BackoffLimit: 3}
	if len(raw) > 0 {
		decoder := json.NewDecoder(bytes.NewReader(raw))
		decoder.DisallowUnknownFields()
		if err := decoder.Decode(&p); err != nil {
			return p, fmt.Errorf("invalid params: %w", err)
		}
	}
	switch {
	case p.Replicas < 1 || p.Replicas > maxReplicas:
		return p, fmt.Errorf("invalid params: params.replicas: %d is out of range 1..=%d", p.Replicas, maxReplicas)
	case p.BackoffLimit > maxBackoffLimit:
		return p, fmt.Errorf("invalid params: params.backoffLimit: %d is out of range 0..=%d", p.BackoffLimit, maxBackoffLimit)
	case p.Image == "" || strings.ContainsFunc(p.Image, unicode.IsSpace):
		return p, fmt.Errorf("invalid params: params.image: %q is not an image reference", p.Image)
	}
	return p, nil
}

// templateHash is the hash of what a worker Pod's manifest takes from params.
func (p params) templateHash() string {
	data, _ := json.Marshal([]any{p.Image, p.Command, p.PodAnnotations})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// worker names one worker Pod: index i's retry k is "<job>-worker-<i>",
// then "<job>-worker-<i>-r<k>" for its k-th replacement.
type worker struct {
	index, retry uint32
}

func (w worker) name(job string) string {
	name := job + "-worker-" + strconv.FormatUint(uint64(w.index), 10)
	if w.retry > 0 {
		name += "-r" + strconv.FormatUint(uint64(w.retry), 10)
	}
	return name
}

// parseWorker reads a worker back from a Pod name; false for any other name.
func parseWorker(job, name string) (worker, bool) {
	rest, ok := strings.CutPrefix(name, job+"-worker-")
	if !ok {
		return worker{}, false
	}
	index, retry, replaced := strings.Cut(rest, "-")
	i, ok := canonical(index)
	if !ok {
		return worker{}, false
	}
	if !replaced {
		return worker{index: i}, true
	}
	digits, ok := strings.CutPrefix(retry, "r")
	k, canon := canonical(digits)
	if !ok || !canon || k == 0 {
		return worker{}, false
	}
	return worker{index: i, retry: k}, true
}

// canonical parses a number written as worker.name writes it: no sign, no
// leading zero.
func canonical(digits string) (uint32, bool) {
	if len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 32)
	return uint32(n), err == nil
}

// phaseOf is a Pod's phase, Pending when the kubelet has not said yet.
func phaseOf(pod *corev1.Pod) corev1.PodPhase {
	switch pod.Status.Phase {
	case corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown:
		return pod.Status.Phase
	}
	return corev1.PodPending
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func finished(pod *corev1.Pod) bool {
	phase := phaseOf(pod)
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// active: the Pod is pending or running (an Unknown Pod is neither active
// nor finished).
func active(pod *corev1.Pod) bool {
	phase := phaseOf(pod)
	return phase == corev1.PodPending || phase == corev1.PodRunning
}

// slot is what the Pods say about one worker index.
type slot struct {
	failed, succeeded []uint32 // retries of its finished Pods
	current           *corev1.Pod
}

func (s *slot) done() bool { return len(s.succeeded) > 0 }

// currentRetry is the retry of the index's current Pod: one past its last failure.
func (s *slot) currentRetry() uint32 {
	if n := len(s.failed); n > 0 {
		return s.failed[n-1] + 1
	}
	return 0
}

func (s *slot) running() bool {
	return s.current != nil && phaseOf(s.current) == corev1.PodRunning
}

// plan is what fanout makes of a DataJob's Pods: the workers to have, and
// the status to report.
type plan struct {
	workers      []worker
	phase        string
	message      string
	workersReady metav1.Condition
	outputs      Outputs
}

func planFanout(job string, p params, pods []corev1.Pod) plan {
	slots := make([]slot, p.Replicas)
	outputs := Outputs{Desired: int64(p.Replicas)}
	type found struct {
		worker
		pod *corev1.Pod
	}
	var workers []found
	for i := range pods {
		w, ok := parseWorker(job, pods[i].Name)
		if !ok || w.index >= p.Replicas {
			continue // not a worker, or scaled away: pruned
		}
		pod := &pods[i]
		workers = append(workers, found{w, pod})
		s := &slots[w.index]
		switch phaseOf(pod) {
		case corev1.PodPending, corev1.PodUnknown:
			outputs.Pending++
		case corev1.PodRunning:
			outputs.Running++
		case corev1.PodSucceeded:
			outputs.Succeeded++
			s.succeeded = append(s.succeeded, w.retry)
		case corev1.PodFailed:
			outputs.Failed++
			s.failed = append(s.failed, w.retry)
		}
	}
	for i := range slots {
		slices.Sort(slots[i].failed)
		slices.Sort(slots[i].succeeded)
	}
	// Only an unfinished Pod of the current retry is an index's current
	// Pod; one of an older retry is left out, and so pruned.
	for _, f := range workers {
		s := &slots[f.index]
		if !finished(f.pod) && f.retry == s.currentRetry() {
			s.current = f.pod
		}
	}

	// waiting: indexes neither done nor running; unready: unfinished
	// indexes whose current Pod is not running and ready.
	var done, running, waiting, unready int
	for i := range slots {
		s := &slots[i]
		if s.done() {
			done++
		}
		if s.running() {
			running++
		}
		if !s.done() && !s.running() {
			waiting++
		}
		if !s.done() && !(s.running() && isReady(s.current)) {
			unready++
		}
	}
	failures := outputs.Failed
	replicas := len(slots)
	result := plan{}
	switch {
	case failures > int64(p.BackoffLimit):
		result.phase = "Failed"
		result.message = fmt.Sprintf("%d worker failures exceed backoffLimit %d", failures, p.BackoffLimit)
		result.workersReady = condition("WorkersReady", false, "BackoffLimitExceeded", "too many workers failed; no replacements are started")
	case done == replicas:
		result.phase = "Succeeded"
		result.message = fmt.Sprintf("%d/%d workers succeeded", replicas, replicas)
		result.workersReady = condition("WorkersReady", false, "Completed", "all workers finished")
	default:
		result.phase = "Pending"
		if waiting == 0 {
			result.phase = "Running"
		}
		result.message = fmt.Sprintf("%d/%d workers running, %d succeeded, %d failed", running, replicas, done, failures)
		if unready == 0 {
			result.workersReady = condition("WorkersReady", true, "AllReady", "every unfinished worker is running and ready")
		} else {
			result.workersReady = condition("WorkersReady", false, "WorkersNotReady", workerCount(unready)+" not running and ready yet")
		}
	}
	outputs.Phase = result.phase

	// Finished Pods stay as the record of the failures; each unfinished
	// index has its current Pod, unless the DataJob failed.
	for i := range slots {
		s := &slots[i]
		for _, retry := range slices.Concat(s.failed, s.succeeded) {
			result.workers = append(result.workers, worker{uint32(i), retry})
		}
		if result.phase != "Failed" && !s.done() {
			result.workers = append(result.workers, worker{uint32(i), s.currentRetry()})
		}
	}
	result.outputs = outputs
	return result
}

func condition(kind string, status bool, reason, message string) metav1.Condition {
	c := metav1.Condition{Type: kind, Status: metav1.ConditionFalse, Reason: reason, Message: message}
	if status {
		c.Status = metav1.ConditionTrue
	}
	return c
}

// workerCount is "1 worker", "3 workers".
func workerCount[N int | int64 | uint32](n N) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

// event is a Kubernetes Event to record on the DataJob.
type event struct {
	kind, reason, note string
}

// events are fanout's Events for what changed since the previous outputs:
// new failures, and a new phase.
func (p plan) events(previous *Outputs, params params) []event {
	var events []event
	var failedBefore int64
	if previous != nil {
		failedBefore = previous.Failed
	}
	now := p.outputs
	if now.Failed > failedBefore {
		events = append(events, event{corev1.EventTypeWarning, "WorkerFailed", fmt.Sprintf(
			"%s failed (%d in all, backoffLimit %d)", workerCount(now.Failed-failedBefore), now.Failed, params.BackoffLimit)})
	}
	if previous != nil && previous.Phase == p.phase {
		return events
	}
	replicas := workerCount(params.Replicas)
	switch p.phase {
	case "Pending":
		if previous == nil {
			events = append(events, event{corev1.EventTypeNormal, "Started", "starting " + replicas})
		} else {
			events = append(events, event{corev1.EventTypeNormal, "Pending", "waiting for workers to start"})
		}
	case "Running":
		events = append(events, event{corev1.EventTypeNormal, "Running", replicas + " running"})
	case "Succeeded":
		events = append(events, event{corev1.EventTypeNormal, "Succeeded", replicas + " succeeded"})
	case "Failed":
		events = append(events, event{corev1.EventTypeWarning, "BackoffLimitExceeded", fmt.Sprintf(
			"%d worker failures exceed backoffLimit %d", now.Failed, params.BackoffLimit)})
	}
	return events
}

// The worker Pod's manifest, as a typed Pod (for Create and Update) and as
// an apply configuration (for server-side apply): the same fields.

func (w worker) labels(job string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "fanout-worker",
		"fanout.policyhost.dev/job":   job,
		"fanout.policyhost.dev/index": strconv.FormatUint(uint64(w.index), 10),
		"fanout.policyhost.dev/retry": strconv.FormatUint(uint64(w.retry), 10),
		managedByLabel:                instance,
		dataJobLabel:                  job,
	}
}

func (p params) annotations(hash string) map[string]string {
	annotations := make(map[string]string, len(p.PodAnnotations)+1)
	maps.Copy(annotations, p.PodAnnotations)
	annotations[templateHashAnnotation] = hash
	return annotations
}

func (w worker) pod(job *DataJob, p params, hash string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:            w.name(job.Name),
			Namespace:       job.Namespace,
			Labels:          w.labels(job.Name),
			Annotations:     p.annotations(hash),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, GroupVersion.WithKind("DataJob"))},
		},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:    "worker",
				Image:   p.Image,
				Command: p.Command,
				Env:     []corev1.EnvVar{{Name: "FANOUT_INDEX", Value: strconv.FormatUint(uint64(w.index), 10)}},
			}},
		},
	}
}

func (w worker) applyConfiguration(job *DataJob, p params, hash string) *corev1ac.PodApplyConfiguration {
	return corev1ac.Pod(w.name(job.Name), job.Namespace).
		WithLabels(w.labels(job.Name)).
		WithAnnotations(p.annotations(hash)).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(GroupVersion.String()).
			WithKind("DataJob").
			WithName(job.Name).
			WithUID(job.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithSpec(corev1ac.PodSpec().
			WithRestartPolicy(corev1.RestartPolicyNever).
			WithContainers(corev1ac.Container().
				WithName("worker").
				WithImage(p.Image).
				WithCommand(p.Command...).
				WithEnv(corev1ac.EnvVar().
					WithName("FANOUT_INDEX").
					WithValue(strconv.FormatUint(uint64(w.index), 10)))))
}
