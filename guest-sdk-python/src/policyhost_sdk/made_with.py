"""The ``policyhost-sdk`` custom section every component built with this SDK
carries: the language, this SDK's version and the world it targets, so that
a host refuses a policy built for a world it does not serve with a reason
naming both. :func:`~policyhost_sdk.componentize.componentize` appends it."""

from __future__ import annotations

import json
from pathlib import Path

from . import __version__

#: The WIT world this SDK targets: the package of ``wit/policy.wit``.
WORLD = "policyhost:reconcile@0.1.0"

#: The section's name.
SECTION = "policyhost-sdk"


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def section(language: str = "python", version: str = __version__) -> bytes:
    """The custom section (id 0: name, then the JSON) as bytes to append."""
    name = SECTION.encode()
    text = json.dumps({"language": language, "sdk": version, "world": WORLD},
                      separators=(",", ":")).encode()
    payload = _leb128(len(name)) + name + text
    return b"\x00" + _leb128(len(payload)) + payload


def append(component: Path) -> None:
    """Appends the section to the component at ``component``: a custom
    section may follow any other, at the top level of a component."""
    with component.open("ab") as out:
        out.write(section())
