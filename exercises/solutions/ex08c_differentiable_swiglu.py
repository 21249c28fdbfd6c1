"""Solution to exercise 8c: a differentiable SwiGLU, right under every autograd mode.

The order of :mod:`tritonforge.ops.swiglu` and :mod:`tritonforge.ops.rmsnorm_backward`: the
forward operator routed under ``op_name``; its backward routed under ``backward_name`` between the
backward kernel and the reference backward; under ``create_graph=True`` (grad mode on inside the
backward) the reference backward through ``runtime.dispatch_reference(..., "autograd", ...)``,
whose PyTorch ops autograd records, so second derivatives are exact; and in the public function,
before the operator, the autograd modes an operator cannot serve (forward-mode AD, ``torch.func``
transforms) sent to the reference, loudly (``runtime.autograd_mode_unsupported``). Every fallback is
warned once and recorded, and raises ``FallbackError`` under strict routing.
"""

import torch

from tritonforge import checks, exercise, runtime

OP_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def register_swiglu(op_name: str, backward_name: str, launch, launch_backward):
    """Register ``op_name`` (gate, up) -> silu(gate) * up with its routed backward; return the
    public function ``swiglu(gate, up)``."""

    @torch.library.custom_op(op_name, mutates_args=())
    def swiglu_op(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return runtime.dispatch(
            op_name, device=gate.device, dtype=gate.dtype,
            kernel=lambda: launch(gate, up), reference=lambda: exercise.swiglu_ref(gate, up),
        )  # fmt: skip

    @swiglu_op.register_fake
    def _(gate, up):
        return torch.empty_like(gate, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph=True: autograd records this backward, so it must be PyTorch ops (the
            # kernel's results would be constants to it: a second derivative of zero).
            return runtime.dispatch_reference(
                backward_name, "autograd", "create_graph=True: the backward kernel is not differentiable; the reference is",
                lambda: exercise.swiglu_backward_ref(dy, gate, up),
            )  # fmt: skip
        return runtime.dispatch(
            backward_name, device=gate.device, dtype=gate.dtype,
            kernel=lambda: launch_backward(dy, gate, up), reference=lambda: exercise.swiglu_backward_ref(dy, gate, up),
        )  # fmt: skip

    swiglu_op.register_autograd(backward, setup_context=setup_context)

    def swiglu(gate, up):
        """``silu(gate) * up``; ``tfg.last_route(op_name)`` tells which path served it."""
        checks.check_tensor("gate", gate, dtypes=OP_DTYPES)
        checks.check_tensor("up", up, dtypes=OP_DTYPES)
        checks.check_same_device(gate=gate, up=up)
        checks.check_same_dtype(gate=gate, up=up)
        checks.check_same_shape(gate=gate, up=up)
        # Forward-mode AD and torch.func transforms: the operator would drop the tangent (or give
        # zeros); the reference, which every mode differentiates, serves the call, loudly.
        mode = runtime.autograd_mode_unsupported(gate, up)
        if mode:
            return runtime.dispatch_reference(op_name, "autograd", mode, lambda: exercise.swiglu_ref(gate, up))
        return swiglu_op(gate, up)

    return swiglu
