"""Kernel names a person can read: a CUDA kernel's demangled signature
(``void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int,
...)``) shortened to the part that says what it is."""
from __future__ import annotations

import re

__all__ = ["readable_kernel"]

_GENERIC = re.compile(r"(^|::)(Kernel|kernel|device_kernel|Kernel2)$")
_MAX = 48


def _split_template(text: str) -> tuple[str, str]:
    """``name<args>rest`` → (``name``, ``args``) with nested brackets respected."""
    i = text.find("<")
    if i < 0:
        return text, ""
    depth = 0
    for j in range(i, len(text)):
        depth += {"<": 1, ">": -1}.get(text[j], 0)
        if depth == 0:
            return text[:i], text[i + 1:j]
    return text[:i], text[i + 1:]


def _first_arg(args: str) -> str:
    depth = 0
    for j, ch in enumerate(args):
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            return args[:j]
    return args


def readable_kernel(name: str, max_len: int = _MAX) -> str:
    """The kernel's own name without ``void``, its parameter list, namespaces and template
    arguments; a generic wrapper (``cutlass::Kernel<X>``) is named by its first template
    argument. At most ``max_len`` characters (an ellipsis in the middle)."""
    text = name.strip()
    if text.startswith("void "):
        text = text[5:]
    depth, cut = 0, len(text)
    for j, ch in enumerate(text):     # the parameter list: the first top-level "("
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0 and j > 0:
            cut = j
            break
    text = text[:cut].strip()
    base, args = _split_template(text)
    if _GENERIC.search(base) and args:
        text = _first_arg(args).strip()
        base, _ = _split_template(text)
    short = base.rsplit("::", 1)[-1] or base
    if len(short) > max_len:
        keep = (max_len - 1) // 2
        short = short[:keep] + "…" + short[-(max_len - 1 - keep):]
    return short or name[:max_len]
