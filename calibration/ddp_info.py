"""What a DistributedDataParallel job looks like, recorded for the sidecar's ``ddp`` section.

Schema (sizes in bytes, ``bucket_cap_mb`` in MiB as DDP takes it)::

    "ddp": {"world_size": int, "rank": int, "local_rank": int | None, "backend": str,
            "hosts": [str, ...],            # host name of each rank, index = rank
            "wrapped": bool,                # read from a DistributedDataParallel module
            "bucket_cap_mb": float | None,  # DDP's bucket_bytes_cap / 2**20
            "first_bucket_bytes": int | None,   # DDP's smaller first bucket (default 1 MiB)
            "bucket_cap_mb_list": [float] | None,
            "gradient_as_bucket_view": bool | None, "find_unused_parameters": bool | None,
            "static_graph": bool | None, "broadcast_buffers": bool | None,
            "params": [{"name": str, "shape": [int], "numel": int, "dtype": str,
                        "bytes": int, "requires_grad": bool, "ddp_ignored": bool}]}
                                            # in registration order (module.named_parameters())

DDP builds its gradient buckets from the parameters that require a gradient and are not
ignored, in reverse registration order, each bucket up to ``bucket_cap_mb`` (the first one,
whose gradients are ready first, up to ``first_bucket_bytes``); the record keeps exactly what
that needs, read from the module itself (``torch/nn/parallel/distributed.py``). Fields that only
a DDP module holds are None when the run's model is not wrapped (``wrapped`` false).

Host names are gathered with ``torch.distributed.all_gather_object``, a collective: every rank
must call :func:`ddp_record` together.
"""
from __future__ import annotations

import os
import socket

import torch
import torch.distributed as dist

MIB = 1024 * 1024


def _param_rows(module: torch.nn.Module, ignored: set[str]) -> list[dict]:
    return [{"name": n, "shape": list(p.shape), "numel": p.numel(), "dtype": str(p.dtype).replace("torch.", ""),
             "bytes": p.numel() * p.element_size(), "requires_grad": bool(p.requires_grad),
             "ddp_ignored": n in ignored}
            for n, p in module.named_parameters()]


def ddp_record(model: torch.nn.Module) -> dict | None:
    """The ``ddp`` section for ``model`` (a ``DistributedDataParallel`` module, or the plain
    module of a job whose process group is initialised), or None outside a distributed job."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    group = model.process_group if is_ddp else None
    hosts: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    local = os.environ.get("LOCAL_RANK")
    rec = {"world_size": dist.get_world_size(group), "rank": dist.get_rank(group),
           "local_rank": int(local) if local is not None and local.isdigit() else None,
           "backend": str(dist.get_backend(group)), "hosts": hosts, "wrapped": is_ddp,
           "bucket_cap_mb": None, "first_bucket_bytes": None, "bucket_cap_mb_list": None,
           "gradient_as_bucket_view": None, "find_unused_parameters": None,
           "static_graph": None, "broadcast_buffers": None}
    if not is_ddp:
        rec["params"] = _param_rows(model, set())
        return rec
    cap = int(model.bucket_bytes_cap)
    # torch sets bucket_bytes_cap_default when DDP's smaller default first bucket is in use
    first = dist._DEFAULT_FIRST_BUCKET_BYTES if getattr(model, "bucket_bytes_cap_default", False) else cap
    caps = list(getattr(model, "bucket_bytes_cap_list", []) or [])
    rec.update(bucket_cap_mb=cap / MIB, first_bucket_bytes=int(first),
               bucket_cap_mb_list=[c / MIB for c in caps] or None,
               gradient_as_bucket_view=bool(model.gradient_as_bucket_view),
               find_unused_parameters=bool(model.find_unused_parameters),
               static_graph=bool(model.static_graph), broadcast_buffers=bool(model.broadcast_buffers),
               params=_param_rows(model.module, set(getattr(model, "parameters_to_ignore", ()))))
    return rec
