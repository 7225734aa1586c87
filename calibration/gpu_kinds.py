"""What kind of GPU activity a trace record is, and what a collective carries.

:func:`categorize` gives a :class:`models.params.DeviceTask`'s category (``CATEGORY_RULES``);
:func:`copy_kind_of` and :func:`is_pinned` read a copy's direction and host memory from its
name; :func:`collective_info` a collective's bytes, group size and name.

**Collectives.** Kernels whose name starts with ``nccl`` or ``rccl`` in any case (including
``ncclDevKernel_*``) are ``collective`` tasks in category ``communication``. Bytes and group
size come from the kernel's own ``Collective name``/``In msg nelems``/``dtype``/``Group size``
args, else from the enclosing ``record_param_comms`` op, else from the enclosing ``nccl:*``
annotation's ``Input Dims``/``Input type``. A count is Python's exact product; past
:data:`MAX_NUMEL` elements, or a dim below 0, a size cannot be right and the bytes are unknown
(numpy's int64 product wrapped [3037000500, 3037000500] to a negative size that refused the
whole trace, and [2**62 + 1, 4] to a 16-byte all-reduce). :func:`collective_info` says so
(its ``bad``), and the step's fit counts them in one warning (:func:`calibration.step_fit.
fit_step`); a size the trace does not give is unknown without a word.
"""
from __future__ import annotations

import bisect
import functools
import math
import re

import numpy as np

from stepsim.calibration.events import EventTable
from stepsim.calibration.op_costs import dtype_bytes

__all__ = ["COLLECTIVE_RE", "CATEGORY_RULES", "MAX_NUMEL", "MAX_NUMEL_WORDS",
           "categorize", "copy_kind_of", "is_pinned", "collective_info", "dims_numel", "size_bytes",
           "ThreadRows"]

MAX_NUMEL = 2**60
"""The most elements an Input Dims (or a collective's ``In msg nelems``) may give: their
bytes, at 8 an element, fit an int64. A larger gloo all-reduce that fits is refused in one
line where it is more than every gradient (:mod:`calibration.gloo_dispatch`); past this it is
a size that cannot be right."""
MAX_NUMEL_WORDS = f"2**{math.log2(MAX_NUMEL):g}"
""":data:`MAX_NUMEL` as a warning writes it ("2**60")."""


def dims_numel(dims, least: int = 0) -> int | None:
    """The elements of a tensor of shape ``dims`` (a list of ints, each at least ``least``;
    ``[]`` a scalar, 1), Python's exact product; None for anything else or past
    :data:`MAX_NUMEL`."""
    if not isinstance(dims, list) or not all(
            type(x) is int and x >= least for x in dims):   # a bool is no dim
        return None
    n = math.prod(dims)
    return n if n <= MAX_NUMEL else None

COLLECTIVE_RE = re.compile(r"^(nccl|rccl)", re.IGNORECASE)
CATEGORY_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("attention", re.compile(r"flash|fmha|attn|attention|sdpa|mha_", re.I)),
    ("conv", re.compile(r"conv|cudnn::(?!bn_)|scudnn|hcudnn|wgrad|dgrad|fprop|winograd|"
                        r"implicit_gemm|miopen|igemm|naive_conv", re.I)),
    ("gemm", re.compile(r"gemm|gemv|cublas|cutlass|matmul|xmma|Cijk_|magma|_nn_|_nt_|_tn_|"
                        r"hipblas|rocblas", re.I)),
    ("normalization", re.compile(r"batch_?norm|bn_fw|bn_bw|layer_?norm|group_?norm|rms_?norm|"
                                 r"instance_?norm|cudnn::bn_|welford", re.I)),
    ("optimizer", re.compile(r"multi_tensor_apply|adam|sgd|adagrad|lamb(?!da)|fused_optim|"
                             r"optimizer", re.I)),
    ("reduction", re.compile(r"reduce|reduction|softmax|cross_entropy|nll_loss|argmax|topk|"
                             r"sort|scan|cub::|norm_kernel|sum_kernel|mean_kernel", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|fill|copy|index|"
                               r"gather|scatter|cat|embedding|relu|gelu|silu|dropout|add|mul|"
                               r"div|triton_poi|transpose|where|clamp|sigmoid|tanh|pool", re.I)),
)
"""Kernel name patterns → category, first match wins (memcpy/memset/communication are decided
before these, by event category and the ``nccl``/``rccl`` prefix)."""


@functools.lru_cache(maxsize=65536)
def categorize(name: str, cat: str) -> str:
    """The DeviceTask category of a GPU activity from its normalised ``cat`` and name (cached:
    a trace repeats its kernel names once per step)."""
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if COLLECTIVE_RE.match(name):
        return "communication"
    for label, rx in CATEGORY_RULES:
        if rx.search(name):
            return label
    return "other"


def copy_kind_of(name: str, raw_kind) -> str:
    """A copy's direction from its name (and raw kind): ``h2d``, ``d2h``, ``d2d`` or ``""``."""
    s = f"{name} {raw_kind or ''}"
    for k, v in (("HtoD", "h2d"), ("DtoH", "d2h"), ("DtoD", "d2d"), ("PtoP", "d2d")):
        if k in s:
            return v
    return ""


def is_pinned(name: str) -> bool | None:
    """Whether a copy's host memory is pinned, from its name (None when it does not say)."""
    if "Pageable" in name:
        return False
    if "Pinned" in name:
        return True
    return None


_SCAN = 8
"""Rows :meth:`ThreadRows.covering` looks at one by one before it looks at the rest at once."""


class ThreadRows:
    """Table rows grouped by their thread (pid, tid), each group in the rows' order, with its
    starts and ends (ns): which of them covers an instant, without a pass over all of them."""

    def __init__(self, table: EventTable, rows: np.ndarray):
        self.n = len(rows)
        groups: dict[tuple[int, int], list[int]] = {}
        for k, r in zip(zip(table.pid[rows].tolist(), table.tid[rows].tolist()), rows.tolist()):
            groups.setdefault(k, []).append(r)
        self._by = {}
        for k, v in groups.items():   # each thread's rows by start (in order on a tie)
            rows = np.array(v, dtype=np.int64)
            o = np.argsort(table.ts_ns[rows], kind="stable")
            rows, ends = rows[o], table.end_ns[rows][o]
            self._by[k] = (rows.tolist(), table.ts_ns[rows].tolist(), ends.tolist(), ends)

    def __len__(self) -> int:
        return self.n

    def covering(self, pid: int, tid: int, t: int) -> int | None:
        """The latest-starting row of thread (pid, tid) with start <= t <= end (the first such
        in order on a tie), or None: the rows starting by ``t`` looked at from the latest (a
        few steps back as a rule; past :data:`_SCAN` of them, the rest at once)."""
        g = self._by.get((int(pid), int(tid)))
        if g is None:
            return None
        rows, ts, end, end_a = g
        k = bisect.bisect_right(ts, t)
        i, lo = k - 1, max(0, k - _SCAN)
        while i >= lo and end[i] < t:
            i -= 1
        if i < lo:
            hit = np.nonzero(end_a[:lo] >= t)[0]
            if not len(hit):
                return None
            i = int(hit[-1])
        j = bisect.bisect_left(ts, ts[i], 0, i)   # the first of its start's tie that covers t
        while end[j] < t:
            j += 1
        return rows[j]


def collective_info(table: EventTable, g: int, launch: int, comm_rows: np.ndarray | ThreadRows,
                    ann_rows: np.ndarray | ThreadRows
                    ) -> tuple[int | None, int | None, str, bool]:
    """(bytes, group size, collective name, bad) of collective kernel row ``g`` launched by
    call row ``launch`` (-1: none), looked up in the ``record_param_comms`` rows ``comm_rows``
    and the ``nccl:*`` annotation rows ``ann_rows`` (row arrays, or :class:`ThreadRows` of
    them made once for many calls). ``bad``: the record gives a size that cannot be right
    (:func:`size_bytes`), so its bytes are None like a size not given."""

    def from_row(r):
        n = int(table.in_nelems[r])
        if n == -1:                      # (−1: not given)
            n = int(table.out_nelems[r])
        b, bad = size_bytes(None if n == -1 else n, table.dtype[r])
        gs = int(table.group_size[r]) if table.group_size[r] > 0 else None
        return b, gs, str(table.coll_name[r]), bad

    if table.coll_name[g]:
        return from_row(g)
    if launch < 0:
        return None, None, "", False
    t, p, th = table.ts_ns[launch], table.pid[launch], table.tid[launch]
    for is_comm, rows in ((True, comm_rows), (False, ann_rows)):
        if not len(rows):
            continue
        if not isinstance(rows, ThreadRows):
            rows = ThreadRows(table, rows)
        r = rows.covering(p, th, t)
        if r is None:
            continue
        if is_comm and table.coll_name[r]:
            return from_row(r)
        if not is_comm:
            try:
                a = table.args(r)
            except LookupError:
                return None, None, "", False
            dims, typ = a.get("Input Dims"), a.get("Input type")
            b, bad = None, False
            if isinstance(dims, list) and dims and isinstance(typ, list) and typ:
                n = dims_numel(dims[0])
                b, bad = size_bytes(n if n is not None else -1, typ[0])
            return b, None, str(table.names[r]).split(":", 1)[-1], bad
    return None, None, "", False


def size_bytes(numel: int | None, dtype) -> tuple[int | None, bool]:
    """(bytes, bad) of ``numel`` elements (None: not given) of ``dtype`` (a Kineto dtype name,
    ``dtype`` or ``Input type``; ``""`` or None: not given): bad where a size is given that
    cannot be right, a count below 0 or past :data:`MAX_NUMEL`, or a dtype that is no tensor
    element type (:func:`calibration.op_costs.dtype_bytes`, the one table: this module's own
    lacked ``unsigned char``, ``signed char`` and ``long int``, which HTA's and PARAM's traces
    write); the bytes are then None, as where either is not given."""
    name = "" if dtype is None else str(dtype).strip()
    size = dtype_bytes(name) if name else None
    bad = (numel is not None and not 0 <= numel <= MAX_NUMEL) or (bool(name) and size is None)
    if bad or numel is None or size is None:
        return None, bad
    return numel * size, False
