"""Solution to exercise 4c: the backward of the fused residual add + RMSNorm.

The forward returns two tensors, ``h = x + residual`` (the next layer's residual) and
``y = w * h * rstd``, so autograd hands the backward two gradients, ``dh`` and ``dy``. ``x`` and
``residual`` reach both outputs only through ``h``, so both get the same gradient: ``dh`` plus
chapter 4's RMSNorm input gradient of ``y`` with respect to ``h``. The weight gets chapter 4's
``dw``, summed over every row (all leading dimensions). ``eps`` is a float: its gradient is None.
"""

import torch


def fused_add_rms_norm_backward(ctx, dh: torch.Tensor, dy: torch.Tensor):
    """(dx, dresidual, dweight, None) from dh = dL/dh and dy = dL/dy."""
    h, weight, rstd = ctx.saved_tensors  # [..., N], [N], [..., 1]
    h_hat = h * rstd
    dy_w = dy * weight
    dh_total = dh + rstd * (dy_w - h_hat * (dy_w * h_hat).mean(-1, keepdim=True))  # both paths into h
    dweight = (dy * h_hat).reshape(-1, h.shape[-1]).sum(0)  # [N]: over every row
    return dh_total, dh_total, dweight, None
