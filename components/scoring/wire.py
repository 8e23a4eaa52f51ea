"""The wire format of test outputs: encoded in the sandbox, decoded and compared in the scorer.

Standard library only (imported both by the fork-server, as a top-level module, and by the
scorer as `components.scoring.wire`).

`to_wire` (sandbox side) turns a returned value into plain JSON data: None/bool/int/float/str
stay as they are (JSON keeps 1 and 1.0 apart, NaN/Infinity are allowed), every container or
other known type becomes a tagged object `{"t": kind, "v": data}` (list, tuple, set, frozenset,
dict as key/value pairs, bytes as hex, complex, range, Decimal, Fraction, date/time/datetime,
timedelta, numpy scalars via `.item()`, numpy arrays). Subclasses of builtins are read through
the base type's own methods, so an overridden `__eq__`, `__iter__` or `__str__` changes nothing.
Anything else (a candidate's own class, a generator, an object whose `__eq__` always says True),
too-deep nesting or too-large output becomes `{"t": "x"}`, which decodes to `Unserialisable`:
a value that equals nothing, itself included.

`from_wire` (scorer side) rebuilds only builtin and standard-library values from that JSON, so
the comparison `decoded_candidate == decoded_reference` runs no candidate code and keeps
Python's own equality rules (1 == 1.0 == True, list != tuple, set == frozenset), as the
official in-process scorer's `==` does for builtin values.
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from decimal import Decimal
from fractions import Fraction

MAX_DEPTH = 64
COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps(..., separators) builds one per call
MAX_INT_BITS = 20_000
_SCALARS = (type(None), bool, str, float)


def _x(reason: str) -> dict:
    return {"t": "x", "v": reason[:120]}


def _type_name(value: object) -> str:
    try:
        return str(type.__dict__["__name__"].__get__(type(value)))[:60]
    except Exception:  # noqa: BLE001 - a hostile metaclass must not break encoding
        return "?"


def _seq(kind: str, items, depth: int) -> dict:
    return {"t": kind, "v": [to_wire(item, depth + 1) for item in items]}


def _builtin_subclass(value: object, depth: int):
    """Read a subclass of a builtin through the base type's own methods (no overrides run)."""
    if isinstance(value, int):
        return to_wire(int.__int__(value), depth)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, tuple):
        return _seq("tuple", tuple.__getitem__(value, slice(None)), depth)
    if isinstance(value, list):
        return _seq("list", list.copy(value), depth)
    if isinstance(value, dict):
        return {"t": "dict", "v": [[to_wire(k, depth + 1), to_wire(v, depth + 1)] for k, v in list(dict.items(value))]}
    if isinstance(value, frozenset):
        return _seq("frozenset", frozenset.__iter__(value), depth)
    if isinstance(value, set):
        return _seq("set", set.__iter__(value), depth)
    return None


def _stdlib(value: object, kind: type):
    if kind is Decimal:
        return {"t": "decimal", "v": str(value)}
    if kind is Fraction:
        return {"t": "fraction", "v": [str(value.numerator), str(value.denominator)]}
    if kind in (_dt.datetime, _dt.date, _dt.time):
        return {"t": kind.__name__, "v": value.isoformat()}
    if kind is _dt.timedelta:
        return {"t": "timedelta", "v": [value.days, value.seconds, value.microseconds]}
    return None


def _numpy(value: object, depth: int):
    np = sys.modules.get("numpy")
    if np is None:
        return None
    if isinstance(value, np.generic):
        return to_wire(value.item(), depth)
    if type(value) is np.ndarray:
        return {"t": "ndarray", "v": [list(value.shape), to_wire(value.tolist(), depth + 1)]}
    return None


def to_wire(value: object, depth: int = 0):
    """Encode `value` as JSON-able data (see module docstring); never raises for odd values."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is int:
        return value if value.bit_length() <= MAX_INT_BITS else _x("int too large")
    if depth > MAX_DEPTH:
        return _x("nesting too deep")
    if kind in (list, tuple, set, frozenset):
        return _seq(kind.__name__, value, depth)
    if kind is dict:
        return {"t": "dict", "v": [[to_wire(k, depth + 1), to_wire(v, depth + 1)] for k, v in value.items()]}
    if kind in (bytes, bytearray):
        return {"t": "bytes", "v": bytes(value).hex()}
    if kind is complex:
        return {"t": "complex", "v": [value.real, value.imag]}
    if kind is range:
        return {"t": "range", "v": [value.start, value.stop, value.step]}
    if kind is type and getattr(value, "__module__", None) == "builtins":
        return {"t": "type", "v": value.__qualname__}
    for encoded in (_stdlib(value, kind), _numpy(value, depth), _builtin_subclass(value, depth)):
        if encoded is not None:
            return encoded
    return _x(f"unserialisable {_type_name(value)}")


def dumps_output(value: object, max_chars: int) -> str:
    """Encode one output as compact JSON text, or the unserialisable marker if too large."""
    try:
        text = COMPACT.encode(to_wire(value))
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        return json.dumps(_x(f"encode failed: {type(exc).__name__}"))
    return text if len(text) <= max_chars else json.dumps(_x("output too large"))


# --- scorer side ---------------------------------------------------------------------------
class Unserialisable:
    """An output that could not be carried out of the sandbox: equal to nothing, not even itself."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Unserialisable({self.reason!r})"


class Opaque:
    """A value kept as (kind, canonical JSON) and compared by that, e.g. a numpy array."""

    __slots__ = ("key",)

    def __init__(self, kind: str, canonical: str) -> None:
        self.key = (kind, canonical)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Opaque{self.key!r}"


def _rebuild(kind: str, data):
    if kind == "list":
        return [from_wire(item) for item in data]
    if kind == "tuple":
        return tuple(from_wire(item) for item in data)
    if kind in ("set", "frozenset"):
        return frozenset(from_wire(item) for item in data)
    if kind == "dict":
        return {from_wire(k): from_wire(v) for k, v in data}
    if kind == "bytes":
        return bytes.fromhex(data)
    if kind == "complex":
        return complex(float(data[0]), float(data[1]))
    if kind == "range":
        return range(*(int(x) for x in data))
    if kind == "decimal":
        return Decimal(data)
    if kind == "fraction":
        return Fraction(int(data[0]), int(data[1]))
    if kind in ("datetime", "date", "time"):
        return getattr(_dt, kind).fromisoformat(data)
    if kind == "timedelta":
        return _dt.timedelta(days=data[0], seconds=data[1], microseconds=data[2])
    if kind == "ndarray":
        return Opaque("ndarray", json.dumps(data, separators=(",", ":")))
    if kind == "type":
        return Opaque("type", str(data))
    if kind == "x":
        return Unserialisable(str(data))
    raise ValueError(f"unknown tag {kind!r}")


def from_wire(data):
    """Decode wire data into builtin/stdlib values; malformed data becomes Unserialisable."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    try:
        if not isinstance(data, dict) or set(data) != {"t", "v"}:
            raise ValueError("not a tagged object")
        return _rebuild(str(data["t"]), data["v"])
    except (ValueError, TypeError, KeyError, IndexError, ArithmeticError, RecursionError) as exc:
        return Unserialisable(f"bad wire data: {type(exc).__name__}")


def outputs_equal(candidate, reference) -> bool:
    """Python equality of two decoded outputs (no candidate code can run here)."""
    try:
        return bool(candidate == reference)
    except Exception:  # noqa: BLE001 - e.g. comparing odd stdlib values
        return False
