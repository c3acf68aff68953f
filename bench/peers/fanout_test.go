package main

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestWorkerNamesRoundTrip(t *testing.T) {
	for _, w := range []worker{{0, 0}, {7, 0}, {3, 1}, {999, 12}} {
		if got, ok := parseWorker("job", w.name("job")); !ok || got != w {
			t.Errorf("%s: got %v, %v", w.name("job"), got, ok)
		}
	}
	for _, other := range []string{"job", "job-worker-", "job-worker-x", "job-worker-01", "job-worker-1-r0",
		"job-worker-1-r", "other-worker-1", "job-worker-1-r02", "job-worker--1", "job-worker-+1"} {
		if got, ok := parseWorker("job", other); ok {
			t.Errorf("%s parsed as %v", other, got)
		}
	}
}

func TestParams(t *testing.T) {
	p, err := parseParams(json.RawMessage(`{"image": "busybox"}`))
	if err != nil || p.Replicas != 1 || p.BackoffLimit != 3 {
		t.Errorf("defaults: %+v, %v", p, err)
	}
	for _, bad := range []string{`{"image": "busybox", "replicas": 0}`, `{"image": "busybox", "replicas": 1001}`,
		`{"image": "busybox", "backoffLimit": 1001}`, `{"image": "busy box"}`, `{}`, `{"image": "b", "extra": 1}`,
		`{"image": "b", "replicas": -1}`} {
		if _, err := parseParams(json.RawMessage(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func pod(name string, phase corev1.PodPhase, ready bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase}}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

func names(workers []worker) []string {
	var out []string
	for _, w := range workers {
		out = append(out, w.name("j"))
	}
	slices.Sort(out)
	return out
}

func TestPlan(t *testing.T) {
	p := params{Replicas: 2, Image: "busybox", BackoffLimit: 1}
	tests := []struct {
		name    string
		pods    []corev1.Pod
		phase   string
		workers []string
		ready   metav1.ConditionStatus
	}{
		{"nothing yet", nil, "Pending", []string{"j-worker-0", "j-worker-1"}, metav1.ConditionFalse},
		{"all running and ready", []corev1.Pod{pod("j-worker-0", corev1.PodRunning, true), pod("j-worker-1", corev1.PodRunning, true)},
			"Running", []string{"j-worker-0", "j-worker-1"}, metav1.ConditionTrue},
		{"a failure is replaced", []corev1.Pod{pod("j-worker-0", corev1.PodSucceeded, false), pod("j-worker-1", corev1.PodFailed, false)},
			"Pending", []string{"j-worker-0", "j-worker-1", "j-worker-1-r1"}, metav1.ConditionFalse},
		{"too many failures", []corev1.Pod{pod("j-worker-0", corev1.PodRunning, true), pod("j-worker-1", corev1.PodFailed, false),
			pod("j-worker-1-r1", corev1.PodFailed, false)}, "Failed", []string{"j-worker-1", "j-worker-1-r1"}, metav1.ConditionFalse},
		{"scaled away and stale retries are left out", []corev1.Pod{pod("j-worker-0", corev1.PodSucceeded, false),
			pod("j-worker-1", corev1.PodSucceeded, false), pod("j-worker-2", corev1.PodRunning, true), pod("x", corev1.PodRunning, true)},
			"Succeeded", []string{"j-worker-0", "j-worker-1"}, metav1.ConditionFalse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planFanout("j", p, tt.pods)
			if got.phase != tt.phase || got.outputs.Phase != tt.phase {
				t.Errorf("phase %s (outputs %s), want %s", got.phase, got.outputs.Phase, tt.phase)
			}
			if !slices.Equal(names(got.workers), tt.workers) {
				t.Errorf("workers %v, want %v", names(got.workers), tt.workers)
			}
			if got.workersReady.Status != tt.ready {
				t.Errorf("WorkersReady %s (%s), want %s", got.workersReady.Status, got.workersReady.Message, tt.ready)
			}
		})
	}
}

func TestEventsOnlyForChanges(t *testing.T) {
	p := params{Replicas: 3, Image: "busybox", BackoffLimit: 3}
	plan := planFanout("j", p, []corev1.Pod{pod("j-worker-0", corev1.PodFailed, false)})
	reasons := func(events []event) (out []string) {
		for _, e := range events {
			out = append(out, e.reason)
		}
		return out
	}
	if got := reasons(plan.events(nil, p)); !slices.Equal(got, []string{"WorkerFailed", "Started"}) {
		t.Errorf("first: %v", got)
	}
	if got := reasons(plan.events(&plan.outputs, p)); len(got) != 0 {
		t.Errorf("unchanged: %v", got)
	}
}
