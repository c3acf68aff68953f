"""The ``policyhost-sdk`` section the SDK appends to every component: a
WebAssembly custom section naming the language, this SDK's version and the
world of the WIT file it carries."""

import json
from pathlib import Path

import policyhost_sdk
from policyhost_sdk import made_with


def _uleb(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def test_the_section_is_a_custom_section_naming_language_version_and_world():
    section = made_with.section()
    assert section[0] == 0, "custom sections have id 0"
    size, at = _uleb(section, 1)
    assert len(section) == at + size
    name_len, at = _uleb(section, at)
    assert section[at:at + name_len] == b"policyhost-sdk"
    text = json.loads(section[at + name_len:])
    assert text == {"language": "python", "sdk": policyhost_sdk.__version__,
                    "world": made_with.WORLD}


def test_the_world_is_the_package_of_the_wit_file_the_sdk_carries():
    wit = (Path(made_with.__file__).parent / "wit" / "policy.wit").read_text()
    assert f"package {made_with.WORLD};" in wit.splitlines()


def test_a_long_section_takes_a_multi_byte_size(tmp_path):
    long = made_with.section(version="0.1.0+" + "x" * 200)
    size, at = _uleb(long, 1)
    assert at == 3 and len(long) == at + size
    component = tmp_path / "c.wasm"
    component.write_bytes(b"\0asm\x0d\0\x01\0")
    made_with.append(component)
    assert component.read_bytes() == b"\0asm\x0d\0\x01\0" + made_with.section()
