"""Solution to exercise 8c: a differentiable SwiGLU, right under every autograd mode.

The order of :mod:`tritonforge.ops.swiglu`: the forward operator routed under ``op_name``; the
backward an operator of its own, ``backward_name``, routed between the backward kernel and the
reference backward, which ``register_autograd``'s backward calls, so that ``torch.compile``
(AOTAutograd) sees one opaque node in the backward graph as it does in the forward; under
``create_graph=True`` (grad mode on inside the backward, outside a compiled region) the reference
backward through ``runtime.dispatch_reference(..., "autograd", ...)``, whose PyTorch ops autograd
records, so second derivatives are exact; and in the public function, before the operator, the
autograd modes an operator cannot serve (forward-mode AD, ``torch.func`` transforms) sent to the
reference, loudly (``runtime.autograd_mode_unsupported``). Every fallback is warned once and
recorded, and raises ``FallbackError`` under strict routing.
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

    @torch.library.custom_op(backward_name, mutates_args=())
    def swiglu_backward_op(dy: torch.Tensor, gate: torch.Tensor, up: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return runtime.dispatch(
            backward_name, device=gate.device, dtype=gate.dtype,
            kernel=lambda: launch_backward(dy, gate, up), reference=lambda: exercise.swiglu_backward_ref(dy, gate, up),
        )  # fmt: skip

    @swiglu_backward_op.register_fake
    def _(dy, gate, up):
        return torch.empty_like(gate, memory_format=torch.contiguous_format), torch.empty_like(up, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            # create_graph=True: autograd records this backward, so it must be PyTorch ops (the
            # kernel's results would be constants to it: a second derivative of zero).
            return runtime.dispatch_reference(
                backward_name, "autograd", "create_graph=True: the backward kernel is not differentiable; the reference is",
                lambda: exercise.swiglu_backward_ref(dy, gate, up),
            )  # fmt: skip
        return swiglu_backward_op(dy, gate, up)

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
