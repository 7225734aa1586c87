"""FLOPs and bytes of one PyTorch operator from its recorded shapes (``record_shapes=True``).

:func:`op_cost` reads an op's name, ``Input Dims`` (``Input dims`` in 1.8-era traces),
``Input type`` and, where newer PyTorch records them, ``Concrete Inputs`` (strides, padding),
and returns an :class:`OpCost`: floating-point operations and the *compulsory* bytes moved
(every input read once, every output written once: the least traffic any kernel can have,
the traffic the roofline's x-axis is drawn with). A profiler's own ``flops`` count
(``with_flops=True``) overrides the FLOPs computed here; bytes always come from shapes.

Counting rules (multiply-add = 2 FLOPs, as the field counts them):

=====================  ==========================================================================
op family              FLOPs / outputs
=====================  ==========================================================================
mm, addmm, bmm,        ``2·M·K·N`` per matrix product (batched: × batch); ``linear`` and
matmul, linear, baddbmm ``matmul`` flatten leading dims into M; output ``M×N`` (× batch)
convolution            ``2·N·C_out·prod(out spatial)·(C_in/groups)·prod(kernel)``; output
(forward)              spatial from stride/padding/dilation when ``Concrete Inputs`` has them,
                       else ``related`` given by the caller (read from the next op's input:
                       *inferred*), else stride 1 and "same" padding (*assumed*)
convolution backward   grad input and grad weight are each one forward's FLOPs (``_input`` /
                       ``_weight`` variants: one, the latter's weight shape as ``related``;
                       ``convolution_backward``: two)
attention (sdpa,       ``4·B·H·L·S·D`` forward (QKᵀ and PV); backward ``2.5×`` that (FlashAttention
flash, efficient)      paper's count, recomputation included)
elementwise            one FLOP per output element; output = the largest input (in-place ops
                       ``op_`` write their first input); tensors beyond the op's arity (1, 2
                       or 3 inputs) are ``out=`` arguments, written and not read
reduction, softmax,    one FLOP per input element (batch/layer norm: 4, for mean, variance,
normalisation          normalise and scale); output: softmax/norms the input's size, sum/mean
                       reduced (1 element per leading row when the dims are not given)
=====================  ==========================================================================

Element sizes come from ``Input type`` (``float`` 4, ``c10::BFloat16`` 2, ...); an unknown type is
assumed to be 4 bytes and said so in ``OpCost.notes``. Ops outside these families return None
(their kernels are left out of the roofline and counted as uncovered).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["OpCost", "op_cost", "dtype_bytes", "dtype_name", "op_family", "conv_shapes"]

_DTYPE_BYTES = {
    "double": 8, "float64": 8, "float": 4, "float32": 4, "half": 2, "float16": 2,
    "bfloat16": 2, "long int": 8, "long": 8, "int64": 8, "int": 4, "int32": 4, "short": 2,
    "int16": 2, "char": 1, "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1,
    "byte": 1, "bool": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
_DTYPE_NAME = {"double": "fp64", "float64": "fp64", "float": "fp32", "float32": "fp32",
               "half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float8_e4m3fn": "fp8",
               "float8_e5m2": "fp8"}

_FAMILIES: tuple[tuple[str, re.Pattern], ...] = (
    ("conv_backward", re.compile(r"^aten::(\w+_)?convolution_backward(_input|_weight)?$|"
                                 r"^aten::(cudnn|miopen|mkldnn)_convolution_backward")),
    ("conv", re.compile(r"^aten::(conv[123]d|convolution|_convolution|cudnn_convolution|"
                        r"miopen_convolution|mkldnn_convolution|conv_transpose[123]d|"
                        r"_convolution_mode)$")),
    ("matmul", re.compile(r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|_addmm_activation)$")),
    ("attention", re.compile(r"^aten::(_?scaled_dot_product\w*attention\w*|_flash_attention_\w+|"
                             r"_efficient_attention_\w+)$")),
    ("normalization", re.compile(r"^aten::(native_|cudnn_|miopen_)?(batch_norm|layer_norm|"
                                 r"group_norm|rms_norm)(_backward)?$|^aten::_fused_rms_norm")),
    ("softmax", re.compile(r"^aten::_?(log_)?softmax(_backward_data)?$")),
    ("reduction", re.compile(r"^aten::(sum|mean|amax|amin|max|min|norm|prod|var|std|"
                             r"linalg_vector_norm|nll_loss\w*|cross_entropy_loss|argmax)$")),
    ("elementwise", re.compile(r"^aten::(add|sub|mul|div|addcmul|addcdiv|relu|threshold|"
                               r"threshold_backward|clamp|clamp_min|clamp_max|gelu|gelu_backward|"
                               r"silu|silu_backward|sigmoid|sigmoid_backward|tanh|"
                               r"tanh_backward|exp|log|sqrt|rsqrt|pow|neg|where|lerp|"
                               r"fill|zero|copy|masked_fill|dropout|native_dropout|"
                               r"native_dropout_backward|hardtanh|leaky_relu|abs|sign|"
                               r"maximum|minimum|_foreach_\w+)_?$")),
)


_TERNARY = re.compile(r"^aten::(addcmul|addcdiv|where|lerp|_foreach_\w+)_?$")
_BINARY = re.compile(r"^aten::(add|sub|mul|div|threshold_backward|\w+_backward|maximum|minimum|"
                     r"masked_fill|copy|pow)_?$")


def _arity(name: str) -> int:
    """Tensor inputs an elementwise op reads (3, 2 or 1); tensors beyond them are ``out=``
    arguments (written, not read), as in 1.9-era ``clamp_min(self, min, out)``."""
    if _TERNARY.match(name):
        return 3
    return 2 if _BINARY.match(name) else 1


@dataclass(frozen=True)
class OpCost:
    """Work of one op instance.

    Attributes:
        family: ``matmul``, ``conv``, ``conv_backward``, ``attention``, ``elementwise``,
            ``reduction``, ``softmax`` or ``normalization``.
        flops: floating-point operations.
        bytes: compulsory bytes (inputs read once + outputs written once).
        dtype: ``fp32``, ``bf16``, ``fp16``, ``fp64``, ``fp8`` or ``other`` (of the first
            floating-point input).
        source: ``shapes`` or ``profiler`` (the trace's ``flops`` arg).
        notes: what was inferred or assumed (empty: all measured from the shapes).
        out_bytes: the part of ``bytes`` that is output written.
    """

    family: str
    flops: float
    bytes: float
    dtype: str
    source: str = "shapes"
    notes: tuple[str, ...] = field(default_factory=tuple)
    out_bytes: float = 0.0


def dtype_bytes(type_name: str) -> int | None:
    """Bytes per element of a recorded ``Input type`` (``c10::BFloat16`` → 2), None if not a
    tensor element type."""
    t = type_name.strip().lower().replace("c10::", "")
    return _DTYPE_BYTES.get(t)


def dtype_name(type_name: str) -> str | None:
    """``fp32``/``bf16``/``fp16``/``fp64``/``fp8`` of a floating-point type name, else None."""
    return _DTYPE_NAME.get(type_name.strip().lower().replace("c10::", ""))


def op_family(name: str) -> str | None:
    """The counting family of op ``name`` (see the module table), None when uncounted."""
    for fam, rx in _FAMILIES:
        if rx.match(name):
            return fam
    return None


def _numel(shape) -> int:
    return math.prod(int(d) for d in shape) if shape else 1


def _tensors(dims, types):
    """(shape, element bytes) of each tensor input (a non-empty shape list)."""
    out = []
    for i, d in enumerate(dims or []):
        if not isinstance(d, list) or not d or not all(isinstance(x, int) for x in d):
            continue
        t = types[i] if types and i < len(types) and isinstance(types[i], str) else ""
        out.append((d, dtype_bytes(t), t))
    return out


def _ints(text) -> list[int] | None:
    """``"[2, 2]"`` → [2, 2]; ``"1"`` → [1]; else None."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        vals = [int(x) for x in text.strip("[] ").split(",") if x.strip()]
    except ValueError:
        return None
    return vals or None


def conv_shapes(name: str, dims, concrete) -> tuple[list[int], list[int], list[int] | None, int]:
    """(input shape, weight shape, output spatial or None, groups) of a forward convolution;
    the output spatial dims come from stride/padding/dilation in ``Concrete Inputs`` (ATen
    ``conv2d(input, weight, bias, stride, padding, dilation, groups)`` and
    ``convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups)``; ``cudnn_convolution(input, weight, padding, stride, dilation, groups, ...)``)."""
    x, w = dims[0], dims[1]
    nsp = len(x) - 2
    out = None
    if concrete and len(concrete) >= 6:
        if "cudnn" in name or "miopen" in name:
            pad, stride, dil = (_ints(concrete[i]) for i in (2, 3, 4))
        else:
            stride, pad, dil = (_ints(concrete[i]) for i in (3, 4, 5))
        if stride and pad and dil:
            def rep(v):
                return v * nsp if len(v) == 1 else v
            stride, pad, dil = rep(stride), rep(pad), rep(dil)
            if len(stride) == len(pad) == len(dil) == nsp:
                out = [(x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1
                       for i in range(nsp)]
    groups = max(1, x[1] // w[1]) if w[1] else 1
    return x, w, out, groups


def _conv_flops(x, w, out_sp, groups) -> float:
    return 2.0 * x[0] * w[0] * _numel(out_sp) * (x[1] / groups) * _numel(w[2:])


def op_cost(name: str, dims, types, concrete=None, flops_arg=None,
            related: list[int] | None = None) -> OpCost | None:
    """FLOPs and compulsory bytes of one op instance (see the module docstring).

    Args:
        name: the op's name (``aten::addmm``).
        dims / types / concrete: its ``Input Dims``, ``Input type``, ``Concrete Inputs`` args.
        flops_arg: the profiler's ``flops`` arg, if any (then ``source`` is ``profiler``).
        related: a shape the op's own args lack, read from a neighbouring op (inferred): a
            forward convolution's output spatial dims, or a ``..._backward_weight`` op's weight
            shape.

    Returns None for an op outside the counted families or without usable shapes.
    """
    fam = op_family(name)
    if fam is None:
        return None
    ts = _tensors(dims, types)
    if not ts:
        return None
    notes: list[str] = []
    sizes = [b for _, b, _ in ts]
    if any(b is None for b in sizes):
        notes.append("an element type is not recorded: assumed 4 bytes")
    eb = [b or 4 for b in sizes]
    dt = next((dtype_name(t) for _, _, t in ts if dtype_name(t)), None) or "other"
    shapes = [s for s, _, _ in ts]
    if fam == "elementwise":
        shapes, eb = shapes[:_arity(name)], eb[:_arity(name)]
    read = float(sum(_numel(s) * b for s, b in zip(shapes, eb)))
    el = eb[0]
    got = _count(fam, name, shapes, concrete, related, notes)
    if got is None:
        return None
    flops, out_elems = got
    source = "shapes"
    if flops_arg is not None:
        try:
            f = float(flops_arg)
        except (TypeError, ValueError):
            f = -1.0
        if math.isfinite(f) and f > 0:
            flops, source = f, "profiler"
    return OpCost(fam, float(flops), read + out_elems * el, dt, source, tuple(notes),
                  float(out_elems * el))


def _count(fam, name, shapes, concrete, related, notes):
    """(FLOPs, output elements) of an op of family ``fam``; None when shapes do not fit."""
    big = max(_numel(s) for s in shapes)
    if fam == "matmul":
        return _matmul(name, shapes)
    if fam == "conv":
        if len(shapes) < 2 or len(shapes[0]) < 3 or len(shapes[1]) != len(shapes[0]):
            return None
        x, w, out, g = conv_shapes(name, [shapes[0], shapes[1]], concrete)
        if out is None and related is not None and len(related) == len(x) - 2:
            out = list(related)
            notes.append("output size read from the next op's input (inferred)")
        if out is None:
            out = list(x[2:])
            notes.append("stride and padding not recorded: stride 1, same padding assumed")
        return _conv_flops(x, w, out, g), x[0] * w[0] * _numel(out)
    if fam == "conv_backward":
        return _conv_backward(name, shapes, related, notes)
    if fam == "attention":
        if len(shapes) < 3 or len(shapes[0]) != 4:
            return None
        b, h, l, d = shapes[0]
        s = shapes[1][2] if len(shapes[1]) == 4 else l
        f = 4.0 * b * h * l * s * d
        if "backward" in name:
            return 2.5 * f, 3 * b * h * l * d
        return f, b * h * l * d
    if fam == "elementwise":
        inplace = name.endswith("_") and not name.endswith("__")
        out = _numel(shapes[0]) if inplace else big
        return float(out), out
    if fam == "normalization":
        return 4.0 * _numel(shapes[0]), _numel(shapes[0])
    if fam == "softmax":
        return float(_numel(shapes[0])), _numel(shapes[0])
    # reductions: the output is small next to the input
    lead = shapes[0][0] if shapes[0] else 1
    return float(_numel(shapes[0])), lead if len(shapes[0]) > 1 else 1


def _matmul(name, shapes):
    short = name.split("::", 1)[-1]
    if short in ("addmm", "baddbmm", "_addmm_activation", "addmv") and len(shapes) >= 3:
        shapes = shapes[1:3]
    if short == "linear":
        if len(shapes) < 2 or len(shapes[1]) != 2:
            return None
        k, n = shapes[0][-1], shapes[1][0]
        m = _numel(shapes[0][:-1])
        return 2.0 * m * k * n, m * n
    if len(shapes) < 2:
        return None
    a, b = shapes[0], shapes[1]
    if len(b) == 1:       # matrix-vector
        return 2.0 * _numel(a), _numel(a[:-1])
    if len(a) < 2 or a[-1] != b[-2]:
        return None
    batch = max(_numel(a[:-2]), _numel(b[:-2]))
    m, k, n = a[-2], a[-1], b[-1]
    return 2.0 * batch * m * k * n, batch * m * n


def _conv_backward(name, shapes, weight, notes):
    """ATen's ``convolution_backward(grad_output, input, weight, ...)``, 1.8-era
    ``cudnn_convolution_backward_input(self_size, grad_output, weight, ...)`` and
    ``..._backward_weight(weight_size, grad_output, input, ...)`` (whose weight shape is an
    int list the profiler does not record: ``weight`` gives it, read from the sibling
    ``_input`` op of the same layer)."""
    if name.endswith("_input"):
        if len(shapes) < 2:
            return None
        go, w = shapes[0], shapes[1]
        notes.append("grad input size taken as the grad output's spatial size (a lower bound "
                     "on bytes for strided convolutions)")
        return 2.0 * go[0] * w[0] * _numel(go[2:]) * w[1] * _numel(w[2:]), \
            go[0] * w[1] * _numel(go[2:])
    if name.endswith("_weight"):
        if len(shapes) < 2 or weight is None or len(weight) != len(shapes[0]):
            return None
        go = shapes[0]
        notes.append("weight shape read from the layer's grad-input op (inferred)")
        return 2.0 * go[0] * weight[0] * _numel(go[2:]) * weight[1] * _numel(weight[2:]), \
            _numel(weight)
    if len(shapes) < 3:
        return None
    go, x, w = shapes[0], shapes[1], shapes[2]
    g = max(1, x[1] // w[1]) if w[1] else 1
    return 2 * _conv_flops(x, w, go[2:], g), _numel(x) + _numel(w)
