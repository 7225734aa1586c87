"""Parsing a user's JSON or YAML input into plain Python data, with errors that say where: one
:class:`~simcore.errors.InputError` naming the file, the problem and the line, column and byte
offset; input that is not UTF-8 names the first bad byte. YAML is read strictly: a key given
twice in one mapping is an error (PyYAML keeps the last silently), and nesting deeper than
:data:`MAX_NESTING` is refused (PyYAML would recurse until Python's stack runs out)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import orjson

from stepsim.simcore.errors import InputError

__all__ = ["parse_json", "parse_yaml", "yaml_value", "location", "top_level_key_count", "json_type",
           "MAX_NESTING", "MAX_YAML_BYTES"]

MAX_YAML_BYTES = 1024**2
"""Largest YAML file read (a scenario, a YAML model): the strict YAML reader took 69 s for a
10 MB scenario (200,000 ops) on 2 loaded cores, 2026-12-05, a 256 MB one (the limit on every
input) would take half an hour; a hand-written scenario or model is a few KB."""
MAX_NESTING = 64
"""Deepest nesting of YAML collections accepted; a StepModel needs about 8 levels. (JSON is
parsed by orjson, which refuses more than 1024.)"""


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (``null``, ``a string``, ``an array``...), for
    messages: "JSON top level is a NoneType" named Python's type to a user who wrote JSON."""
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return f"a {type(value).__name__}"


def location(raw: bytes, offset: int) -> str:
    """``line L, column C, byte N`` of byte ``offset`` of ``raw`` (1-based line and column;
    the column counts bytes)."""
    offset = max(0, min(offset, len(raw)))
    line = raw.count(b"\n", 0, offset) + 1
    col = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line}, column {col}, byte {offset}"


def _check_utf8(path: Path, raw: bytes, kind: str) -> str:
    """``raw`` decoded, or InputError at its first byte that is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(path, f"the {kind} file is not valid UTF-8 ({e.reason}, byte "
                               f"0x{raw[e.start]:02x})", location(raw, e.start)) from None


BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte order mark, which Windows editors (Notepad, PowerShell's ``Out-File``) put
before a file's text: RFC 8259 section 8.1 lets a JSON reader ignore it, and :func:`parse_json`
does (orjson refuses it: a model saved from Notepad was "not valid JSON", and a ledger's first
record, line 1, was skipped as "not a ledger record")."""


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON value")


class _TwiceGiven(ValueError):
    """A key given twice in one JSON object (its name in ``args[0]``)."""


def _keys_once(pairs: list) -> None:
    """Raise :class:`_TwiceGiven` for a key given twice among ``pairs`` (one object's); the
    object itself is not kept (None in its place): orjson's tree is the one read, and a
    second tree beside it doubled the peak memory of a large sidecar (break23: 10^6 batch
    records, 191 MB, 2.55 GB peak)."""
    if len(pairs) > 1:
        keys = [k for k, _ in pairs]
        if len(set(keys)) < len(keys):
            seen: set = set()
            for k in keys:
                if k in seen:
                    raise _TwiceGiven(k)
                seen.add(k)
    return None


def _key_twice(raw: bytes) -> str | None:
    """The first key given twice in one object of the JSON text ``raw`` (which orjson has
    read), or None."""
    try:
        json.loads(raw, object_pairs_hook=_keys_once)
    except _TwiceGiven as e:
        return str(e.args[0])
    except (ValueError, RecursionError):   # NaN, 1e400: orjson refused or took it first
        pass
    return None


def parse_json(path: str | Path, raw: bytes, kind: str, overflow_ok: bool = False,
               unique_keys: bool = False) -> Any:
    """``raw`` (bytes of the ``kind`` file at ``path``) parsed as JSON. ``overflow_ok``: a
    number past a double's range (``1e400``, valid JSON orjson refuses) is read as ±inf, for a
    caller that drops the record holding it (a trace's event), instead of refused.
    ``unique_keys``: a key given twice in one object is refused, as YAML's is (JSON readers
    keep the last one silently: a sidecar whose second ``"loader"`` said 7 workers was
    calibrated as 7); for the files that are not traces (a sidecar, a model, a ledger line),
    as it reads the text a second time with the standard library: 4x orjson's time (1.36 s
    against 0.34 s for a 57 MB sidecar of 200,000 batches; 6.5 ms against 1.5 ms for a 0.5 MB
    GPU model; 2026-12-05, load 2.1).

    Raises:
        InputError: not UTF-8, not valid JSON (with the line, column and byte offset), or
            (``unique_keys``) a key given twice.
    """
    p = Path(path)
    whole, skip = raw, len(BOM) if raw[:len(BOM)] == BOM else 0
    raw = raw[skip:] if skip else raw   # (a copy only where there is one)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if overflow_ok and "number is infinity" in str(e):
            try:   # the standard library's reader reads it as inf (and NaN is still refused)
                return json.loads(raw, parse_constant=_no_constant)
            except (ValueError, RecursionError):
                pass
        text = _check_utf8(p, whole, kind)[1 if skip else 0:]
        what = str(e).split(": line ")[0]
        offset = skip + len(text[:e.pos].encode("utf-8"))
        if kind == "trace" and raw.lstrip()[:1] not in (b"{", b"["):   # not JSON at all
            what += (" (a trace is the JSON file torch.profiler writes, .json or .json.gz, or "
                     "a capture folder holding one)")
        raise InputError(p, f"not valid JSON: {what}", location(whole, offset)) from None
    twice = _key_twice(raw) if unique_keys else None
    if twice is not None:
        raise InputError(p, f"the key {twice!r:.80} is given twice in one object of the {kind} "
                            "(a JSON reader keeps one silently: which was meant?)")
    return data


_OBJECT = msgspec.json.Decoder(dict[str, msgspec.Raw])


def top_level_key_count(raw: bytes, key: str) -> int:
    """How many times ``key`` is a key of the top-level object of the JSON text ``raw``
    (which JSON readers take silently, the last one winning): each ``"key":`` whose text
    before it opens that object with whole values. Costs a parse of the text before each
    occurrence: for a key that is rarely written twice."""
    n = 0
    for m in re.finditer(rb'"' + re.escape(key.encode()) + rb'"\s*:', raw):
        try:
            n += isinstance(_OBJECT.decode(bytes(raw[:m.start()]) + b'"k": 0}'), dict)
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
    return n


def yaml_value(text: str) -> Any:
    """``text`` (a value given on the command line) read as YAML with :func:`parse_yaml`'s
    rules. Raises yaml.YAMLError."""
    import yaml

    from stepsim.simcore.yaml_loader import StrictLoader

    return yaml.load(text, Loader=StrictLoader)


def parse_yaml(path: str | Path, raw: bytes, kind: str) -> Any:
    """``raw`` (bytes of the ``kind`` file at ``path``) parsed as YAML (which reads JSON too),
    refusing duplicate keys and nesting deeper than :data:`MAX_NESTING`.

    Raises:
        InputError: not UTF-8, not valid YAML, a duplicate key or too deep (with the line,
            column and byte offset where it is).
    """
    import yaml

    from stepsim.simcore.yaml_loader import StrictLoader

    p = Path(path)
    if len(raw) > MAX_YAML_BYTES:
        raise InputError(p, f"{len(raw) / 1024**2:.1f} MiB of YAML: a {kind} file in YAML may "
                            f"hold at most {MAX_YAML_BYTES // 1024**2} MiB (YAML is read at about "
                            "0.15 MiB/s)" + ("; save a larger model as JSON" if
                                             kind == "StepModel" else ""))
    text = _check_utf8(p, raw, kind)
    try:
        return yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        where = None
        if mark is not None:
            where = location(raw, len(text[:mark.index].encode("utf-8")))
        raise InputError(p, f"not valid YAML: {what}", where) from None
    except RecursionError:   # pragma: no cover - MAX_NESTING keeps the stack shallow
        raise InputError(p, "not valid YAML: nested too deeply") from None
