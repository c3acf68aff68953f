"""``Cleanup.once_stopped`` waits for what runs (Pods and batch Jobs) and
never for a claim, which only exists: an unbound one stays pending on a
cluster that provisions none."""

from policyhost_sdk import Child, ChildPhase, Cleanup


def test_a_pending_claim_does_not_hold_the_cleanup_a_pending_pod_does():
    claim = Child("scratch", "v1", "PersistentVolumeClaim", ChildPhase.PENDING)
    pod = Child("w-0", "v1", "Pod", ChildPhase.RUNNING)
    job = Child("j", "batch/v1", "Job", ChildPhase.PENDING)
    done = Child("w-1", "v1", "Pod", ChildPhase.SUCCEEDED)
    assert Cleanup.once_stopped([claim, done], 2000).retry_after_ms is None
    assert Cleanup.once_stopped([claim, pod], 2000).retry_after_ms == 2000
    assert Cleanup.once_stopped([job], 2000).retry_after_ms == 2000
