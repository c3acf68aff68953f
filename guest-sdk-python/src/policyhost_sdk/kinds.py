# Generated from guest-sdk/kinds.json by `POLICYHOST_BLESS=1 cargo test -p
# policyhost-sdk --test kinds`: edit that file, not this one.
"""What the builders write for each kind of child: its API version and kind, the rule
of its name, the restart policies it accepts, and the values written when the policy
sets none."""

from __future__ import annotations

from dataclasses import dataclass

from . import names


@dataclass(frozen=True)
class Kind:
    """A kind of child, as its builder writes it."""

    api_version: str
    kind: str
    name_what: str
    """What an error calls its name, e.g. ``Pod name``."""
    name_rule: names.Rule


POD = Kind("v1", "Pod", "Pod name", names.dns1123_subdomain)

JOB = Kind("batch/v1", "Job", "Job name", names.dns1123_label)
JOB_RESTART_POLICIES = ("Never", "OnFailure")
JOB_RESTART_POLICY_RULE = "must be Never or OnFailure"

CONFIG_MAP = Kind("v1", "ConfigMap", "ConfigMap name", names.dns1123_subdomain)

SERVICE = Kind("v1", "Service", "Service name", names.dns1035_label)
SERVICE_TYPE = "ClusterIP"

PERSISTENT_VOLUME_CLAIM = Kind("v1", "PersistentVolumeClaim", "PersistentVolumeClaim name", names.dns1123_subdomain)
PERSISTENT_VOLUME_CLAIM_ACCESS_MODE = "ReadWriteOnce"

DEFAULT_RESTART_POLICY = "Never"
PORT_PROTOCOL = "TCP"
PORT_NAME_MAX_LENGTH = 15
PORT_NAME_LENGTH_RULE = "must be at most 15 characters"
