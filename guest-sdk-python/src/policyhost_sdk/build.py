"""Builders for the common children, producing valid manifests.

Each builder checks names, label keys and values, container names,
environment variable names, resource quantities and volumes with the rules of
:mod:`policyhost_sdk.names`, then writes the object as a
:class:`~policyhost_sdk.DesiredChild`. The host sets the namespace, the
owner reference and the ``policyhost.dev/*`` labels, so builders leave them
out. The manifests are those of the Rust SDK's builders for the same calls
(``guest-sdk/builders.json`` holds the cases all SDKs agree on).

    worker = Container("worker", "busybox:1.36").command(["sh", "-c", "work"])
    pod = Pod("demo-worker-0").label("app", "demo").container(worker).build()

The builders: :class:`Pod` (and :class:`PodTemplate` for many alike),
:class:`BatchJob`, :class:`ConfigMap`, :class:`Service` and
:class:`PersistentVolumeClaim`, which a Pod declares as a volume
(``Pod.volume_claim``) for its containers to mount (``Container.mount``):

    claim = PersistentVolumeClaim("demo-data").storage("10Gi").build()
    pod = (Pod("demo-worker-1").volume_claim("data", "demo-data")
           .container(Container("worker", "busybox:1.36").mount("data", "/data")).build())
"""

from __future__ import annotations

import enum
import itertools
import json
import re
from typing import Any, Callable, Iterable, Optional

from . import kinds, names
from .result import DesiredChild, PolicyError, manifest_text


class BuildError(PolicyError):
    """A builder refused to build: the message names the value and the rule."""


def _invalid(what: str, value: str, reason: str) -> BuildError:
    return BuildError(f"{what} {quoted(value)} is invalid: {reason}")


def quoted(text: str) -> str:
    """``text`` quoted as the Rust SDK quotes a value in a message (``{:?}``)."""
    out = ['"']
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif char == "\0":
            out.append("\\0")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


_known: dict[names.Rule, set[str]] = {}
"""The texts each rule found valid: a policy checks the same label keys,
values and variable names for every child it builds, and inside a component
(a fresh instance per call) a lookup costs far less than a check. At most
1,000 texts per rule."""


def _check(what: str, value: str, rule: names.Rule) -> None:
    valid = _known.setdefault(rule, set())
    if value in valid:
        return
    reason = rule(value)
    if reason is not None:
        raise _invalid(what, value, reason)
    if len(valid) < 1000:
        valid.add(value)


def _check_name(kind: kinds.Kind, name: str) -> None:
    _check(kind.name_what, name, kind.name_rule)


def _head(kind: kinds.Kind) -> dict[str, str]:
    return {"apiVersion": kind.api_version, "kind": kind.kind}


def _check_labels(labels: dict[str, str]) -> None:
    for key, value in labels.items():
        _check("label key", key, names.label_key)
        _check("label value", value, names.label_value)


_QUANTITY = re.compile(r"[+-]?(?=\.?[0-9])[0-9]*\.?[0-9]*([mkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]+)?")


def _check_quantity(value: str) -> None:
    if not _QUANTITY.fullmatch(value):
        raise _invalid(
            "resource quantity", value, "must be a number with an optional unit such as m, Mi or Gi"
        )


class RestartPolicy(enum.Enum):
    """What the kubelet does when a container exits."""

    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    """Never restart it: the Pod ends ``Succeeded`` or ``Failed``."""

    @classmethod
    def default(cls) -> "RestartPolicy":
        """The builders' default (``kinds.DEFAULT_RESTART_POLICY``): DataJob
        children usually run to completion."""
        return cls(kinds.DEFAULT_RESTART_POLICY)


class AccessMode(enum.Enum):
    """How the nodes may mount a claimed volume."""

    READ_WRITE_ONCE = "ReadWriteOnce"
    READ_ONLY_MANY = "ReadOnlyMany"
    READ_WRITE_MANY = "ReadWriteMany"
    """Read-write by the Pods of many nodes: what Pods spread over nodes need
    to share one volume (the storage class must support it)."""
    READ_WRITE_ONCE_POD = "ReadWriteOncePod"
    """Read-write by one Pod only; Kubernetes allows it with no other mode."""

    @classmethod
    def default(cls) -> "AccessMode":
        """The mode of a claim that sets none
        (``kinds.PERSISTENT_VOLUME_CLAIM_ACCESS_MODE``)."""
        return cls(kinds.PERSISTENT_VOLUME_CLAIM_ACCESS_MODE)


UPDATE_STRATEGY_ANNOTATION = "policyhost.dev/update-strategy"
"""The annotation that declares a child's update strategy: the one
``policyhost.dev/*`` key a policy sets."""


class UpdateStrategy(enum.Enum):
    """What the host does with a child that exists and no longer matches the
    policy's manifest (every builder's ``update_strategy``)."""

    IN_PLACE = "InPlace"
    """Apply the change to the object as it is (the default); a change the
    API server refuses as immutable is the DataJob's ``ImmutableChange``."""
    RECREATE = "Recreate"
    """Apply in place; when refused as immutable, delete the child and create
    it anew. A finished Pod keeps its old form: it is the record of its run."""
    RECREATE_ALWAYS = "RecreateAlways"
    """Delete and create anew on every change, finished Pods included."""
    ON_DELETE = "OnDelete"
    """Leave the child as it is until it is gone; the next one is new."""


class _Metadata:
    """``label`` and ``annotation``, shared by every builder."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._labels: dict[str, str] = {}
        self._annotations: dict[str, str] = {}

    def label(self, key: str, value: str):
        """Sets a label (a key set twice takes the last value)."""
        self._labels[key] = value
        return self

    def annotation(self, key: str, value: str):
        """Sets an annotation (a key set twice takes the last value)."""
        self._annotations[key] = value
        return self

    def update_strategy(self, strategy: UpdateStrategy):
        """Declares how the host changes this child once it exists."""
        return self.annotation(UPDATE_STRATEGY_ANNOTATION, UpdateStrategy(strategy).value)

    def _check_metadata(self) -> None:
        _check_labels(self._labels)
        for key in self._annotations:
            _check("annotation key", key, names.label_key)

    def _metadata(self, hole: Optional[str] = None) -> dict[str, Any]:
        """The metadata; with ``hole``, the name and the labels are ``hole``."""
        metadata: dict[str, Any] = {"name": self._name if hole is None else hole}
        if hole is not None:
            metadata["labels"] = hole
        elif self._labels:
            metadata["labels"] = dict(self._labels)
        if self._annotations:
            metadata["annotations"] = dict(self._annotations)
        return metadata


class Container:
    """A container of a Pod or Job."""

    def __init__(self, name: str, image: str) -> None:
        self._name = name
        self._image = image
        self._command: list[str] = []
        self._args: list[str] = []
        self._env: dict[str, str] = {}
        self._requests: dict[str, str] = {}
        self._limits: dict[str, str] = {}
        self._working_dir: Optional[str] = None
        self._ports: list[tuple[str, int]] = []
        self._mounts: list[tuple[str, str]] = []

    def command(self, command: Iterable[str]) -> "Container":
        """The entrypoint (empty: the image's)."""
        self._command = list(command)
        return self

    def args(self, args: Iterable[str]) -> "Container":
        """The entrypoint's arguments."""
        self._args = list(args)
        return self

    def env(self, name: str, value: str) -> "Container":
        """Sets an environment variable (a name set twice takes the last value)."""
        self._env[name] = value
        return self

    def request(self, resource: str, quantity: str) -> "Container":
        """Requests a resource, e.g. ``("cpu", "100m")``."""
        self._requests[resource] = quantity
        return self

    def limit(self, resource: str, quantity: str) -> "Container":
        """Limits a resource, e.g. ``("memory", "128Mi")``."""
        self._limits[resource] = quantity
        return self

    def working_dir(self, path: str) -> "Container":
        self._working_dir = path
        return self

    def port(self, name: str, port: int) -> "Container":
        """Declares a TCP port (name: a DNS-1123 label of at most 15 characters)."""
        self._ports.append((name, port))
        return self

    def mount(self, volume: str, path: str) -> "Container":
        """Mounts the Pod's volume ``volume`` (see ``Pod.volume_claim``) at
        ``path``, an absolute path without ``:``."""
        self._mounts.append((volume, path))
        return self

    def _check(self) -> None:
        _check("container name", self._name, names.dns1123_label)
        if not self._image.strip():
            raise _invalid("container image", self._image, "must not be empty")
        for name in self._env:
            _check("environment variable name", name, names.env_var_name)
        for resource, quantity in [*self._requests.items(), *self._limits.items()]:
            _check("resource name", resource, names.label_key)
            _check_quantity(quantity)
        for name, port in self._ports:
            _check("container port name", name, names.dns1123_label)
            if len(name) > kinds.PORT_NAME_MAX_LENGTH:
                raise _invalid("container port name", name, kinds.PORT_NAME_LENGTH_RULE)
            if not 1 <= port <= 65535:
                raise _invalid("container port", str(port), "must be between 1 and 65535")
        for i, (_, path) in enumerate(self._mounts):
            # The kubelet splits ``path:mode`` on the colon.
            if not path.startswith("/") or ":" in path:
                raise _invalid("mount path", path, "must be an absolute path without ':'")
            # kube-apiserver refuses two mounts at one place.
            if any(other == path for _, other in self._mounts[:i]):
                raise _invalid("mount path", path, "must be unique")

    def _manifest(self, hole: Optional[str] = None) -> dict[str, Any]:
        """The manifest; with ``hole``, ``env`` is ``hole``."""
        container: dict[str, Any] = {"name": self._name, "image": self._image}
        if self._command:
            container["command"] = list(self._command)
        if self._args:
            container["args"] = list(self._args)
        if hole is not None:
            container["env"] = hole
        elif self._env:
            container["env"] = _env_list(self._env)
        if self._requests or self._limits:
            resources: dict[str, Any] = {}
            if self._requests:
                resources["requests"] = dict(self._requests)
            if self._limits:
                resources["limits"] = dict(self._limits)
            container["resources"] = resources
        if self._working_dir is not None:
            container["workingDir"] = self._working_dir
        if self._ports:
            container["ports"] = [
                {"name": name, "containerPort": port, "protocol": kinds.PORT_PROTOCOL}
                for name, port in self._ports
            ]
        if self._mounts:
            container["volumeMounts"] = [
                {"name": volume, "mountPath": path} for volume, path in self._mounts
            ]
        return container


class _PodSpec(_Metadata):
    """What a Pod and a Job's Pod template share."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._restart_policy = RestartPolicy.default()
        self._containers: list[Container] = []
        self._service_account: Optional[str] = None
        self._node_selector: dict[str, str] = {}
        self._volumes: list[tuple[str, str]] = []
        self._active_deadline_seconds: Optional[int] = None

    def restart_policy(self, policy: RestartPolicy):
        self._restart_policy = policy
        return self

    def container(self, container: Container):
        """Adds a container (names must be unique)."""
        self._containers.append(container)
        return self

    def service_account(self, name: str):
        self._service_account = name
        return self

    def node_selector(self, key: str, value: str):
        self._node_selector[key] = value
        return self

    def volume_claim(self, volume: str, claim: str):
        """Declares the volume ``volume`` (a DNS-1123 label, unique in the
        Pod), backed by the PersistentVolumeClaim ``claim``, for containers
        to mount (:meth:`Container.mount`)."""
        self._volumes.append((volume, claim))
        return self

    def _check_spec(self, kind: str) -> None:
        if not self._containers:
            raise BuildError(f"{kind} `{self._name}` has no containers")
        seen: set[str] = set()
        for container in self._containers:
            container._check()
            if container._name in seen:
                raise BuildError(
                    f"{kind} `{self._name}` has two containers named `{container._name}`"
                )
            seen.add(container._name)
        if self._service_account is not None:
            _check("service account name", self._service_account, names.dns1123_subdomain)
        _check_labels(self._node_selector)
        self._check_volumes(kind)

    def _check_volumes(self, kind: str) -> None:
        """Volume names are unique labels, claims are claim names, and every
        mount names a declared volume."""
        declared: set[str] = set()
        for volume, claim in self._volumes:
            _check("volume name", volume, names.dns1123_label)
            if volume in declared:
                raise _invalid("volume name", volume, "must be unique within the Pod")
            declared.add(volume)
            _check_name(kinds.PERSISTENT_VOLUME_CLAIM, claim)
        for container in self._containers:
            for volume, _ in container._mounts:
                if volume not in declared:
                    raise BuildError(
                        f"{kind} `{self._name}` has no volume `{volume}` "
                        f"for container `{container._name}` to mount"
                    )

    def _spec(self, hole: Optional[str] = None) -> dict[str, Any]:
        """The spec; with ``hole``, every container's ``env`` is ``hole``."""
        spec: dict[str, Any] = {
            "restartPolicy": self._restart_policy.value,
            "containers": [c._manifest(hole) for c in self._containers],
        }
        if self._service_account is not None:
            spec["serviceAccountName"] = self._service_account
        if self._node_selector:
            spec["nodeSelector"] = dict(self._node_selector)
        if self._volumes:
            spec["volumes"] = [
                {"name": volume, "persistentVolumeClaim": {"claimName": claim}}
                for volume, claim in self._volumes
            ]
        return spec


class Pod(_PodSpec):
    """A core ``v1`` Pod; restart policy ``Never`` unless set."""

    def active_deadline_seconds(self, seconds: int) -> "Pod":
        self._active_deadline_seconds = seconds
        return self

    def build(self) -> DesiredChild:
        """Checks the Pod and writes its manifest (raises :class:`BuildError`)."""
        _check_name(kinds.POD, self._name)
        self._check_metadata()
        self._check_spec(kinds.POD.kind)
        return DesiredChild.from_manifest(self._manifest())

    def template(self) -> "PodTemplate":
        """Checks the Pod once, for many Pods that differ only in their name,
        labels and environment variables: see :class:`PodTemplate`."""
        self._check_metadata()
        self._check_spec(kinds.POD.kind)
        # The manifest's text, cut where each Pod writes its own name, labels
        # and variables; the mark is any text the manifest holds nowhere else.
        holes = 2 + len(self._containers)
        for n in itertools.count():
            mark = manifest_text(f"\0hole {n}")
            text = manifest_text(self._manifest(json.loads(mark))).split(mark)
            if len(text) == holes + 1:
                variables = [dict(c._env) for c in self._containers]
                return PodTemplate(text, dict(self._labels), variables)
        raise AssertionError("unreachable")

    def _manifest(self, hole: Optional[str] = None) -> dict[str, Any]:
        spec = self._spec(hole)
        if self._active_deadline_seconds is not None:
            spec["activeDeadlineSeconds"] = self._active_deadline_seconds
        return {**_head(kinds.POD), "metadata": self._metadata(hole), "spec": spec}


def _env_list(variables: dict[str, str]) -> list[dict[str, str]]:
    """``variables`` as a container's ``env``."""
    return [{"name": k, "value": v} for k, v in variables.items()]


def _member(key: str, mapping: dict[str, str], value: Callable[[dict[str, str]], Any]) -> str:
    """``,"key":<value>`` for a mapping with entries, else nothing."""
    return f',"{key}":{manifest_text(value(mapping))}' if mapping else ""


def _cut(part: str, key: str) -> str:
    """``part`` without the ``,"key":`` it ends with."""
    return part[: -len(f',"{key}":')]


class PodTemplate:
    """A checked Pod to stamp out: each :meth:`pod` gets a name, and labels
    and environment variables of its own (a label or variable the template
    sets too takes the Pod's value). The template keeps its manifest as
    text, so a Pod costs the serialisation of only what it sets, as in the
    Rust SDK."""

    def __init__(
        self, text: list[str], labels: dict[str, str], variables: list[dict[str, str]]
    ) -> None:
        # The manifest around its holes (the name, the labels, each
        # container's env), and each container's own variables.
        self._text = text
        self._labels = labels
        self._variables = variables

    def pod(self, name: str) -> "TemplatePod":
        return TemplatePod(self, name)

    def _manifest(self, name: str, labels: dict[str, str], env: dict[str, str]) -> str:
        """The manifest of the Pod ``name`` with its own labels and variables."""
        text = self._text
        parts = [text[0], manifest_text(name), _cut(text[1], "labels")]
        parts.append(_member("labels", {**self._labels, **labels}, dict))
        for i, own in enumerate(self._variables):
            parts += [_cut(text[i + 2], "env"), _member("env", {**own, **env}, _env_list)]
        parts.append(text[-1])
        return "".join(parts)


class TemplatePod:
    """One Pod of a :class:`PodTemplate`."""

    def __init__(self, template: PodTemplate, name: str) -> None:
        self._template = template
        self._name = name
        self._labels: dict[str, str] = {}
        self._env: dict[str, str] = {}

    def label(self, key: str, value: str) -> "TemplatePod":
        self._labels[key] = value
        return self

    def env(self, name: str, value: str) -> "TemplatePod":
        """Sets a variable in every container of this Pod."""
        self._env[name] = value
        return self

    def build(self) -> DesiredChild:
        _check_name(kinds.POD, self._name)
        _check_labels(self._labels)
        for name in self._env:
            _check("environment variable name", name, names.env_var_name)
        manifest = self._template._manifest(self._name, self._labels, self._env)
        return DesiredChild(kinds.POD.api_version, kinds.POD.kind, self._name, manifest)


class BatchJob(_PodSpec):
    """A ``batch/v1`` Job. Its name is a DNS-1123 label (it becomes a label
    of its Pods); its labels are also its Pod template's."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._numbers: dict[str, int] = {}

    def backoff_limit(self, limit: int) -> "BatchJob":
        self._numbers["backoffLimit"] = limit
        return self

    def completions(self, count: int) -> "BatchJob":
        self._numbers["completions"] = count
        return self

    def parallelism(self, count: int) -> "BatchJob":
        self._numbers["parallelism"] = count
        return self

    def active_deadline_seconds(self, seconds: int) -> "BatchJob":
        self._numbers["activeDeadlineSeconds"] = seconds
        return self

    def ttl_seconds_after_finished(self, seconds: int) -> "BatchJob":
        self._numbers["ttlSecondsAfterFinished"] = seconds
        return self

    def build(self) -> DesiredChild:
        _check_name(kinds.JOB, self._name)
        self._check_metadata()
        self._check_spec(kinds.JOB.kind)
        if self._restart_policy.value not in kinds.JOB_RESTART_POLICIES:
            raise _invalid(
                "Job restart policy", self._restart_policy.value, kinds.JOB_RESTART_POLICY_RULE
            )
        order = ["backoffLimit", "completions", "parallelism", "activeDeadlineSeconds",
                 "ttlSecondsAfterFinished"]
        spec: dict[str, Any] = {key: self._numbers[key] for key in order if key in self._numbers}
        template_metadata = {"labels": dict(self._labels)} if self._labels else {}
        spec["template"] = {"metadata": template_metadata, "spec": self._spec()}
        manifest = {**_head(kinds.JOB), "metadata": self._metadata(), "spec": spec}
        return DesiredChild.from_manifest(manifest)


class ConfigMap(_Metadata):
    """A core ``v1`` ConfigMap."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._data: dict[str, str] = {}

    def data(self, key: str, value: str) -> "ConfigMap":
        self._data[key] = value
        return self

    def build(self) -> DesiredChild:
        _check_name(kinds.CONFIG_MAP, self._name)
        self._check_metadata()
        for key in self._data:
            _check("ConfigMap key", key, names.config_map_key)
        manifest = {**_head(kinds.CONFIG_MAP), "metadata": self._metadata(),
                    "data": dict(self._data)}
        return DesiredChild.from_manifest(manifest)


class Service(_Metadata):
    """A core ``v1`` Service of type ClusterIP; its name is a DNS-1035 label."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._selector: dict[str, str] = {}
        self._ports: list[tuple[str, int, int]] = []
        self._headless = False

    def selector(self, key: str, value: str) -> "Service":
        self._selector[key] = value
        return self

    def port(self, name: str, port: int, target_port: int) -> "Service":
        self._ports.append((name, port, target_port))
        return self

    def headless(self) -> "Service":
        """No cluster IP (``clusterIP: None``): DNS answers with the Pods."""
        self._headless = True
        return self

    def build(self) -> DesiredChild:
        _check_name(kinds.SERVICE, self._name)
        self._check_metadata()
        _check_labels(self._selector)
        if not self._ports and not self._headless:
            raise _invalid("Service", self._name, "needs at least one port unless headless")
        seen: set[str] = set()
        for name, port, target in self._ports:
            _check("Service port name", name, names.dns1123_label)
            if not (1 <= port <= 65535 and 1 <= target <= 65535):
                raise _invalid(
                    "Service port", name, "port and target port must be between 1 and 65535"
                )
            if name in seen:
                raise _invalid("Service port name", name, "must be unique within the Service")
            seen.add(name)
        spec: dict[str, Any] = {"type": kinds.SERVICE_TYPE}
        if self._headless:
            spec["clusterIP"] = "None"
        if self._selector:
            spec["selector"] = dict(self._selector)
        spec["ports"] = [
            {"name": name, "port": port, "targetPort": target, "protocol": kinds.PORT_PROTOCOL}
            for name, port, target in self._ports
        ]
        manifest = {**_head(kinds.SERVICE), "metadata": self._metadata(), "spec": spec}
        return DesiredChild.from_manifest(manifest)


class PersistentVolumeClaim(_Metadata):
    """A core ``v1`` PersistentVolumeClaim: storage a Pod mounts with
    ``Pod.volume_claim`` and ``Container.mount``."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._storage: Optional[str] = None
        self._access_modes: list[AccessMode] = []
        self._storage_class: Optional[str] = None

    def storage(self, quantity: str) -> "PersistentVolumeClaim":
        """The storage requested (``spec.resources.requests.storage``), e.g.
        ``"10Gi"``; required."""
        self._storage = quantity
        return self

    def access_mode(self, mode: AccessMode) -> "PersistentVolumeClaim":
        """Adds an access mode (a mode added twice is written once); without
        one, :meth:`AccessMode.default`."""
        if mode not in self._access_modes:
            self._access_modes.append(mode)
        return self

    def storage_class(self, name: str) -> "PersistentVolumeClaim":
        """The storage class (a DNS-1123 subdomain); without one, the
        cluster's default class."""
        self._storage_class = name
        return self

    def build(self) -> DesiredChild:
        kind = kinds.PERSISTENT_VOLUME_CLAIM
        _check_name(kind, self._name)
        self._check_metadata()
        if self._storage is None:
            raise _invalid(kind.kind, self._name, "needs a storage request")
        _check_quantity(self._storage)
        modes = self._access_modes or [AccessMode.default()]
        if len(modes) > 1 and AccessMode.READ_WRITE_ONCE_POD in modes:
            raise _invalid("access mode", AccessMode.READ_WRITE_ONCE_POD.value,
                           "may not be combined with other access modes")
        if self._storage_class is not None:
            _check("storage class name", self._storage_class, names.dns1123_subdomain)
        spec: dict[str, Any] = {
            "accessModes": [mode.value for mode in modes],
            "resources": {"requests": {"storage": self._storage}},
        }
        if self._storage_class is not None:
            spec["storageClassName"] = self._storage_class
        manifest = {**_head(kind), "metadata": self._metadata(), "spec": spec}
        return DesiredChild.from_manifest(manifest)
