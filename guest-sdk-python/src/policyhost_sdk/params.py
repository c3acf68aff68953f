"""Typed ``spec.params``: declare the fields, get them checked, and refusals
that name the field, worded as the Rust SDK words them (so a policy gives
the same answer in every language, and golden cases hold for all).

    class FanoutParams(Params):
        replicas = Field(U32, default=1)
        image = Field(STRING)
        command = Field(ListOf(STRING), default=[])

A nested object is a :class:`Struct` of another ``Params`` class.
Field names are written in ``snake_case`` and read from ``camelCase``
(``backoff_limit`` ← ``backoffLimit``). A field without a default is
required; a field the class does not declare is refused.
"""

from __future__ import annotations

import copy
import json
from typing import Any, ClassVar, Optional

from .result import InvalidParams

_REQUIRED = object()


class _Refusal(Exception):
    """A value that does not fit, with the path to it (innermost last)."""

    def __init__(self, message: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def under(self, segment: str) -> "_Refusal":
        return _Refusal(self.message, (segment, *self.path))


def _unexpected(value: Any) -> str:
    """How serde names a JSON value it did not expect."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{'true' if value else 'false'}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{_float_text(value)}`"
    if isinstance(value, str):
        return f"string {json.dumps(value, ensure_ascii=False)}"
    if isinstance(value, list):
        return "sequence"
    return "map"


def _float_text(value: float) -> str:
    text = repr(value)
    return text if "." in text or "e" in text or "inf" in text or "nan" in text else text + ".0"


class Kind:
    """A JSON type a field may hold."""

    expected: str = ""

    def read(self, value: Any) -> Any:
        raise NotImplementedError

    def refuse(self, value: Any) -> _Refusal:
        return _Refusal(f"invalid type: {_unexpected(value)}, expected {self.expected}")


class _Unsigned(Kind):
    def __init__(self, bits: int) -> None:
        self.expected = f"u{bits}"
        self.max = (1 << bits) - 1

    def read(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse(value)
        if not 0 <= value <= self.max:
            raise _Refusal(f"invalid value: integer `{value}`, expected {self.expected}")
        return value


class _Signed(Kind):
    def __init__(self, bits: int) -> None:
        self.expected = f"i{bits}"
        self.min, self.max = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def read(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse(value)
        if not self.min <= value <= self.max:
            raise _Refusal(f"invalid value: integer `{value}`, expected {self.expected}")
        return value


class _String(Kind):
    expected = "a string"

    def read(self, value: Any) -> str:
        if not isinstance(value, str):
            raise self.refuse(value)
        return value


class _Bool(Kind):
    expected = "a boolean"

    def read(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.refuse(value)
        return value


class _Float(Kind):
    expected = "f64"

    def read(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.refuse(value)
        return float(value)


class ListOf(Kind):
    """A JSON array of one kind."""

    expected = "a sequence"

    def __init__(self, item: Kind) -> None:
        self.item = item

    def read(self, value: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.refuse(value)
        items = []
        for index, item in enumerate(value):
            try:
                items.append(self.item.read(item))
            except _Refusal as refusal:
                raise refusal.under(f"[{index}]") from None
        return items


class MapOf(Kind):
    """A JSON object with string keys and values of one kind."""

    expected = "a map"

    def __init__(self, value: Kind) -> None:
        self.value = value

    def read(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.refuse(value)
        entries = {}
        for key, item in value.items():
            try:
                entries[key] = self.value.read(item)
            except _Refusal as refusal:
                raise refusal.under(key) from None
        return dict(sorted(entries.items()))


class Nullable(Kind):
    """A value of one kind, or ``null`` (read as ``None``)."""

    def __init__(self, inner: Kind) -> None:
        self.inner = inner
        self.expected = inner.expected

    def read(self, value: Any) -> Any:
        return None if value is None else self.inner.read(value)


class Struct(Kind):
    """An object read by a :class:`Params` class, e.g. ``Field(Nullable(Struct(Scratch)))``:
    refusals inside it name the path (``params.scratch.size: …``), as serde's do."""

    def __init__(self, params: type["Params"]) -> None:
        self.params = params
        self.expected = f"struct {params.__name__}"

    def read(self, value: Any) -> Any:
        return self.params._read(value)


class AnyJson(Kind):
    """Any JSON value, unchecked."""

    def read(self, value: Any) -> Any:
        return value


U32 = _Unsigned(32)
U64 = _Unsigned(64)
I64 = _Signed(64)
STRING = _String()
BOOL = _Bool()
F64 = _Float()
ANY = AnyJson()


class Field:
    """One declared param: its kind and, unless required, its default (a
    fresh copy per call)."""

    def __init__(self, kind: Kind, default: Any = _REQUIRED) -> None:
        self.kind = kind
        self.default = default
        self.name = ""
        self.json_name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        head, *rest = name.split("_")
        self.json_name = head + "".join(part.title() for part in rest)

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


class Params:
    """Base class of a policy's params: declare :class:`Field` attributes.

    ``Params`` itself declares none, so it reads ``{}`` and refuses any field.
    """

    fields: ClassVar[list[Field]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = [value for value in vars(cls).values() if isinstance(value, Field)]
        cls.fields = [*cls.fields, *declared]

    @classmethod
    def parse(cls, text: str) -> "Params":
        """Reads ``spec.params`` (JSON text; blank reads as ``{}``).

        Raises :class:`~policyhost_sdk.InvalidParams` naming the field.
        """
        try:
            value = json.loads(text) if text.strip() else {}
        except ValueError as error:
            raise InvalidParams(f"params: {error}") from None
        try:
            return cls._read(value)
        except _Refusal as refusal:
            raise InvalidParams(_describe(refusal)) from None

    @classmethod
    def _read(cls, value: Any) -> "Params":
        if not isinstance(value, dict):
            raise _Refusal(f"invalid type: {_unexpected(value)}, expected struct {cls.__name__}")
        by_json = {field.json_name: field for field in cls.fields}
        params = cls.__new__(cls)
        for key, item in value.items():
            field = by_json.get(key)
            if field is None:
                raise _Refusal(_unknown_field(key, cls.fields)).under(key)
            try:
                setattr(params, field.name, field.kind.read(item))
            except _Refusal as refusal:
                raise refusal.under(key) from None
        for field in cls.fields:
            if field.json_name in value:
                continue
            if field.required:
                raise _Refusal(f"missing field `{field.json_name}`")
            setattr(params, field.name, copy.deepcopy(field.default))
        return params

    def __repr__(self) -> str:
        values = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in self.fields)
        return f"{type(self).__name__}({values})"


def _unknown_field(key: str, fields: list[Field]) -> str:
    names = [f"`{field.json_name}`" for field in fields]
    if not names:
        return f"unknown field `{key}`, there are no fields"
    if len(names) == 1:
        return f"unknown field `{key}`, expected {names[0]}"
    if len(names) == 2:
        return f"unknown field `{key}`, expected {names[0]} or {names[1]}"
    return f"unknown field `{key}`, expected one of {', '.join(names)}"


def _describe(refusal: _Refusal) -> str:
    """``params.replicas: …``, ``params.command[0]: …``, ``params: …``."""
    path = ""
    for segment in refusal.path:
        path += segment if segment.startswith("[") else f".{segment}"
    return f"params{path}: {refusal.message}"


def parse_params(params: Optional[type], text: str) -> Any:
    """Reads params with a :class:`Params` class, or as plain JSON with
    ``None``."""
    if params is None:
        try:
            return json.loads(text) if text.strip() else {}
        except ValueError as error:
            raise InvalidParams(f"params: {error}") from None
    return params.parse(text)
