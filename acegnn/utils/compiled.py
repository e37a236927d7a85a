"""What ``torch.compile`` built, checked against the plain code it replaces.

TorchInductor keeps the kernels it compiles in an on-disk cache. With torch 2.13 a cache
filled under one vector width (AVX-512) and read under another (``ATEN_CPU_CAPABILITY=avx2``)
hands out kernels that compute wrong sums and NaN (docs/benchmarks.md, "One seed on two
machines"). The candidate kernels (:class:`acegnn.nn.value_head.CompiledKernel`) and the
compiled optimiser step (:meth:`acegnn.algos.base.LearnerBase.gradient_step`) are each
compared once with the plain code by :func:`check_compiled`, which raises where they differ.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch
from torch import Tensor

#: The largest difference from the plain code, relative and absolute, that passes.
RTOL, ATOL = 1e-4, 1e-4


def _cache_dir() -> str:
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
        return cache_dir()
    except (ImportError, AttributeError):  # pragma: no cover - another torch layout
        return "TorchInductor's cache directory"


def _tensors(out: Union[Tensor, Sequence]) -> List[Tensor]:
    """The tensors of a result: a tensor, or those of a tuple or list."""
    return [out] if isinstance(out, Tensor) else [t for t in out if isinstance(t, Tensor)]


def check_compiled(name: str, got: Union[Tensor, Sequence], want: Union[Tensor, Sequence],
                   switch: str, atol: float = ATOL) -> None:
    """Raise ``RuntimeError`` where the compiled result ``got`` differs from the plain
    ``want`` (each a tensor or a sequence of them) beyond float rounding (NaN where the
    plain one has none counts), naming ``name``, the cache to empty and ``switch``, the
    config key that turns compilation off."""
    for mine, plain in zip(_tensors(got), _tensors(want)):
        how: Optional[str] = None
        if mine.shape != plain.shape:
            how = f"shape {tuple(mine.shape)}, the plain one's {tuple(plain.shape)}"
        elif not torch.allclose(mine, plain, rtol=RTOL, atol=atol, equal_nan=True):
            how = f"largest difference {(mine - plain).abs().nan_to_num(float('inf')).max():.3g}"
        if how:
            raise RuntimeError(
                f"the compiled {name} disagrees with the plain code ({how}): TorchInductor's "
                f"cache may hold kernels built for another CPU (a cache shared between "
                f"machines, or ATEN_CPU_CAPABILITY changed). Empty it (rm -rf {_cache_dir()}) "
                f"or give this machine its own (TORCHINDUCTOR_CACHE_DIR), or train with "
                f"{switch}=false")


__all__ = ["ATOL", "RTOL", "check_compiled"]
