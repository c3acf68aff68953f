"""A ``PodTemplate`` writes each Pod's manifest from text cut once: the text
must be what ``Pod.build`` writes for the same Pod, byte for byte, whatever
the template holds (text that looks like the template's own marks
included)."""

import pytest

from policyhost_sdk import build

MARK = '","\0hole 0","\0hole 1'


def _pod(name, labels, annotations, images):
    """A Pod with ``labels``, ``annotations`` and one container per
    ``images`` entry (an image and its variables)."""
    pod = build.Pod(name).service_account("runner").active_deadline_seconds(60)
    for key, value in labels.items():
        pod.label(key, value)
    for key, value in annotations.items():
        pod.annotation(key, value)
    for i, (image, variables) in enumerate(images):
        container = build.Container(f"c{i}", image).command(["sh", "-c", image])
        for key, value in variables.items():
            container.env(key, value)
        pod.container(container.request("cpu", "100m"))
    return pod


TEMPLATES = {
    "bare": ({}, {}, [("busybox", {})]),
    "labelled": ({"app": "demo", "tier": "a"}, {"note": "x"}, [("busybox", {"MODE": "x"})]),
    "two containers": ({"app": "demo"}, {}, [("busybox", {"MODE": "x"}), ("side", {})]),
    "marks in its text": ({"app": "demo"}, {"note": MARK}, [(MARK, {"MODE": MARK})]),
}

OWN = [
    ({}, {}),
    ({"index": "2"}, {"INDEX": "2"}),
    ({"tier": "b", "index": "2"}, {"MODE": "y", "INDEX": "2"}),
]


@pytest.mark.parametrize("description", sorted(TEMPLATES))
def test_a_templates_pods_are_written_as_pod_build_writes_them(description):
    labels, annotations, images = TEMPLATES[description]
    template = _pod("worker", labels, annotations, images).template()
    for pod_labels, pod_variables in OWN:
        one = template.pod("demo-worker-2")
        for key, value in pod_labels.items():
            one.label(key, value)
        for key, value in pod_variables.items():
            one.env(key, value)
        # The same Pod, built whole: its own labels and variables over the template's.
        whole = _pod(
            "demo-worker-2",
            {**labels, **pod_labels},
            annotations,
            [(image, {**variables, **pod_variables}) for image, variables in images],
        ).build()
        assert one.build() == whole
