"""Kubernetes' rules for names, label keys and values, ConfigMap keys and
environment variable names, as apimachinery's ``util/validation`` states
them: the same rules, and the same reasons, as the host and the Rust SDK
(``names/``). ``names/cases.json`` holds the cases every implementation
must agree on.

Each rule returns ``None`` for a valid text, else the reason it breaks.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

Rule = Callable[[str], Optional[str]]

_EMPTY = "must not be empty"
_OVER_63 = "must be at most 63 characters"
_OVER_253 = "must be at most 253 characters"
_ENDS = "must start and end with a letter or digit"

_LABEL = re.compile(r"[a-z0-9-]*")
_SUBDOMAIN = re.compile(r"[a-z0-9.-]*")
_SUBDOMAIN_PARTS = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")
_QUALIFIED = re.compile(r"[A-Za-z0-9_.-]*")
_ALNUM = re.compile(r"[A-Za-z0-9]")
_ENV = re.compile(r"[A-Za-z_.-][A-Za-z0-9_.-]*")
_CONFIG_KEY = re.compile(r"[A-Za-z0-9_.-]+")


def _ascii_len(text: str) -> int:
    return len(text.encode())


def dns1123_label(name: str) -> Optional[str]:
    """A DNS-1123 label: a Pod's container name, a Service port name."""
    if not name:
        return _EMPTY
    if _ascii_len(name) > 63:
        return _OVER_63
    if not _LABEL.fullmatch(name):
        return "must consist of lower-case letters, digits and '-'"
    if name.startswith("-") or name.endswith("-"):
        return _ENDS
    return None


def dns1123_subdomain(name: str) -> Optional[str]:
    """A DNS-1123 subdomain: most objects' names."""
    if not name:
        return _EMPTY
    if _ascii_len(name) > 253:
        return _OVER_253
    if not _SUBDOMAIN.fullmatch(name):
        return "must consist of lower-case letters, digits, '-' and '.'"
    if not _SUBDOMAIN_PARTS.fullmatch(name):
        return "each dot-separated part must start and end with a letter or digit"
    return None


def dns1035_label(name: str) -> Optional[str]:
    """A DNS-1035 label: a Service's name."""
    reason = dns1123_label(name)
    if reason is not None:
        return reason
    if not "a" <= name[0] <= "z":
        return "must start with a lower-case letter"
    return None


def _qualified_part(part: str, allow_empty: bool) -> Optional[str]:
    if not part:
        return None if allow_empty else _EMPTY
    if _ascii_len(part) > 63:
        return _OVER_63
    if not _QUALIFIED.fullmatch(part):
        return "must consist of letters, digits, '-', '_' and '.'"
    if not (_ALNUM.fullmatch(part[0]) and _ALNUM.fullmatch(part[-1])):
        return _ENDS
    return None


def label_key(key: str) -> Optional[str]:
    """A label or annotation key: an optional DNS-1123 subdomain prefix and
    ``/``, then a qualified name."""
    prefix, slash, name = key.partition("/")
    if not slash:
        return _qualified_part(key, False)
    return dns1123_subdomain(prefix) or _qualified_part(name, False)


def label_value(value: str) -> Optional[str]:
    """A label value: empty, or a qualified name."""
    return _qualified_part(value, True)


def env_var_name(name: str) -> Optional[str]:
    """An environment variable name."""
    if _ENV.fullmatch(name):
        return None
    return "must consist of letters, digits, '-', '.' and '_', not starting with a digit"


def config_map_key(key: str) -> Optional[str]:
    """A ConfigMap data key."""
    if _ascii_len(key) <= 253 and key not in (".", "..") and _CONFIG_KEY.fullmatch(key):
        return None
    return "must be 1-253 letters, digits, '-', '.' or '_', and not '.' or '..'"


RULES: dict[str, Rule] = {
    "dns1123Label": dns1123_label,
    "dns1123Subdomain": dns1123_subdomain,
    "dns1035Label": dns1035_label,
    "labelKey": label_key,
    "labelValue": label_value,
    "envVarName": env_var_name,
    "configMapKey": config_map_key,
}
"""Every rule, by the name ``names/cases.json`` uses."""
