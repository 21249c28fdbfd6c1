"""Solution to exercise 8a: register and route ``scaled_residual_add(x, residual, alpha)``.

The order of :mod:`tritonforge.ops.rmsnorm`, the package's template: the routed call
(``runtime.dispatch``: the given launcher, or the reference when a check refuses or the launch
raises; warned once, recorded under ``op_name``, an error in strict mode), the PyTorch operator
whose body is that routed call (opaque to ``torch.compile``), its fake (shape and dtype without
computing: what the compiler traces), its backward, and the public function that validates the
inputs (errors naming the argument, before any routing) and calls the operator.
"""

import numbers

import torch

from tritonforge import checks, exercise, runtime

OP_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def register_scaled_residual_add(op_name: str, launch):
    """Register the operator ``op_name`` (Tensor x, Tensor residual, float alpha) -> Tensor,
    routed between ``launch(x, residual, alpha)`` and the reference, and return the public
    function ``scaled_residual_add(x, residual, alpha)``."""

    def routed(x, residual, alpha):
        return runtime.dispatch(
            op_name,  # the name last_path / last_route know it by
            device=x.device,
            dtype=x.dtype,  # check 3: dispatch refuses bf16 below sm_80 with it
            kernel=lambda: launch(x, residual, alpha),  # check 4: an exception here is a fallback
            reference=lambda: exercise.scaled_residual_add_ref(x, residual, alpha),
        )

    @torch.library.custom_op(op_name, mutates_args=())
    def scaled_residual_add_op(x: torch.Tensor, residual: torch.Tensor, alpha: float) -> torch.Tensor:
        return routed(x, residual, alpha)

    @scaled_residual_add_op.register_fake
    def _(x, residual, alpha):
        # What the compiler traces: the output's shape, dtype and layout, no data.
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[2]

    def backward(ctx, dout):
        # d(residual + alpha*x)/dx = alpha, d/dresidual = 1; alpha is a number, no gradient.
        return ctx.alpha * dout, dout, None

    scaled_residual_add_op.register_autograd(backward, setup_context=setup_context)

    def scaled_residual_add(x, residual, alpha):
        """``residual + alpha * x`` in one pass; ``tfg.last_path(op_name)`` tells which path ran."""
        checks.check_tensor("x", x, dtypes=OP_DTYPES)
        checks.check_tensor("residual", residual, dtypes=OP_DTYPES)
        checks.check_same_device(x=x, residual=residual)
        checks.check_same_dtype(x=x, residual=residual)
        checks.check_same_shape(x=x, residual=residual)
        if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real):
            raise TypeError(f"alpha must be a real Python number, got {type(alpha).__name__}")
        return scaled_residual_add_op(x, residual, float(alpha))

    return scaled_residual_add
