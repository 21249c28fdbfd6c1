"""Input checks: bad input is an error naming the argument (``TypeError`` for a wrong type or
dtype, ``ValueError`` for a wrong shape, device or value), raised before any routing, never a
fallback. Every call of every op runs them, so they compare first and build a message only when
something differs (host time is what a decode-sized call is made of)."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_tensor(
    name: str,
    value: object,
    *,
    dtypes: Sequence[torch.dtype] = FLOAT_DTYPES,
    ndim_min: int = 0,
) -> torch.Tensor:
    """Raise ``TypeError`` unless ``value`` is a tensor of one of ``dtypes``; return it."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name} has dtype {str(value.dtype).replace('torch.', '')}; expected one of: {allowed}")
    if value.dim() < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got shape {tuple(value.shape)}")
    return value


def check_same_device(**tensors: torch.Tensor) -> torch.device:
    """Raise ``ValueError`` unless all tensors live on one device; return that device.

    These checks run on every call of every op, so they compare first and build a message only
    when something differs (host time is what a decode-sized call is made of)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    device = first.device
    for name, t in items:
        if t.device != device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {device}; move them to one device")
    return device


def check_same_dtype(**tensors: torch.Tensor) -> torch.dtype:
    """Raise ``TypeError`` unless all tensors share a dtype; return it (cheap, as above)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    dtype = first.dtype
    for name, t in items:
        if t.dtype != dtype:
            raise TypeError(
                f"{name} has dtype {str(t.dtype).replace('torch.', '')} but {first_name} has "
                f"{str(dtype).replace('torch.', '')}; cast one of them"
            )
    return dtype


def check_same_shape(**tensors: torch.Tensor) -> torch.Size:
    """Raise ``ValueError`` unless all tensors share a shape; return it (cheap, as above)."""
    items = iter(tensors.items())
    first_name, first = next(items)
    shape = first.shape
    for name, t in items:
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but {first_name} has shape {tuple(shape)}")
    return shape


def type_name(value: object) -> str:
    """A value's type as an error message names it: ``numpy.int64``, not the ambiguous ``int64``."""
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def check_bool(name: str, value: object) -> bool:
    """``value`` as a Python bool: a bool, or NumPy's ``bool_`` (what ``array.any()`` returns); else
    ``TypeError`` naming the argument and the type it got."""
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {type_name(value)}")


def check_dim(name: str, value: object, ndim: int) -> int:
    """``value`` as a dimension index in ``[0, ndim)`` (negative counts from the end, as PyTorch's
    ``dim``); ``TypeError`` for a non-integer, ``IndexError`` out of range, as ``torch.softmax`` raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type_name(value)}")
    if not -ndim <= value < ndim:
        raise IndexError(f"{name} {value} is out of range for a tensor of {ndim} dimension(s) (expected [-{ndim}, {ndim - 1}])")
    return int(value) % ndim
