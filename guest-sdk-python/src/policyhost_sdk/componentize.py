"""Builds a policy module into a WebAssembly component with componentize-py,
against the WIT world this package carries.

    python -m policyhost_sdk.componentize fanout:Fanout -o fanout.wasm

``MODULE:CLASS`` names the :class:`~policyhost_sdk.Policy` subclass; the
module's directory (or ``--path``) is searched for it and its imports.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import made_with

WIT = Path(__file__).parent / "wit"
WORLD = "datajob-policy"
APP_MODULE = "policyhost_app"


def app_source(module: str, class_name: str) -> str:
    """The module componentize-py wraps: the policy class, exported."""
    return (
        "from policyhost_sdk.component import export\n"
        f"from {module} import {class_name}\n"
        f"WitWorld = export({class_name})\n"
    )


def componentize(target: str, output: Path, paths: list[Path]) -> None:
    """Builds ``MODULE:CLASS`` into ``output``; raises ``SystemExit`` with
    componentize-py's message on failure."""
    module, sep, class_name = target.partition(":")
    if not sep or not module or not class_name:
        raise SystemExit(f"policy {target!r} must be MODULE:CLASS, e.g. fanout:Fanout")
    tool = shutil.which("componentize-py") or str(Path(sys.executable).parent / "componentize-py")
    if not Path(tool).exists():
        raise SystemExit("componentize-py is not installed: pip install 'policyhost-sdk[build]'")
    sdk_root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="policyhost-app-") as scratch:
        (Path(scratch) / f"{APP_MODULE}.py").write_text(app_source(module, class_name))
        search = [Path(scratch), *paths, sdk_root]
        command = [tool, "-d", str(WIT), "-w", WORLD, "componentize"]
        for path in search:
            command += ["-p", str(path)]
        command += [APP_MODULE, "-o", str(output)]
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"componentize-py failed:\n{done.stderr or done.stdout}")
    made_with.append(output)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m policyhost_sdk.componentize",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("target", help="MODULE:CLASS of the policy")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the component to write")
    parser.add_argument("-p", "--path", type=Path, action="append", default=[],
                        help="a directory to find the module and its imports in (default: .)")
    args = parser.parse_args(argv)
    componentize(args.target, args.output, args.path or [Path.cwd()])
    print(f"built {args.output} ({args.output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
