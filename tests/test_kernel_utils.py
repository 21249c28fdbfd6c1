"""The shared kernel helpers: the cached launcher's specialization key, and its launches."""

import pytest
import torch

import tritonforge as tfg
from tritonforge.kernel_utils import _runtime_args, _specialization
from tritonforge.reference import rms_norm_ref
from tritonforge.ops.rmsnorm import rms_norm_fwd

from .helpers import assert_within_budget


def test_specialization_separates_what_triton_compiles_separately():
    base = torch.empty(64, dtype=torch.float32)
    aligned, misaligned = base[:8], base[1:9]  # 4-byte offset: not 16-byte aligned
    assert _specialization(aligned) != _specialization(misaligned)
    assert _specialization(aligned) != _specialization(base.half()[:8])  # dtype
    assert _specialization(aligned) == _specialization(base[4:12])  # 16-byte offset: same binary
    assert _specialization(aligned)[-1] is False  # on the CPU: never the key of a GPU launch
    ints = [_specialization(v) for v in (1, 16, 17, 2**31, 2**63 + 16)]
    assert len(set(ints)) == 5  # ==1, multiple of 16, plain, i64, u64
    assert _specialization(32) == _specialization(48) and _specialization(3) == _specialization(5)
    assert _specialization(True) != _specialization(1)
    assert _specialization(1e-6) == _specialization(0.5)  # floats are not specialized


def test_launch_values_and_key_agree_with_the_specialization():
    """The launcher computes key and launch values in one pass; the key must be exactly the
    per-argument specialization, and a tensor must travel as its data pointer."""
    base = torch.empty(64)
    args = (base[:8], base[1:9], base.half(), 1, 16, 17, 2**31, -(2**31) - 1, 2**63 + 16, True, 1e-6, None)
    specializations, values = _runtime_args(args)
    assert specializations == tuple(_specialization(a) for a in args)
    assert values[:3] == [t.data_ptr() for t in args[:3]] and values[3:] == list(args[3:])


@pytest.mark.gpu
def test_a_cpu_tensor_never_reuses_a_gpu_launch():
    """Same dtype and alignment as a cached GPU launch, but on the CPU: the key differs, so the
    launch goes through Triton, which refuses the host pointer with an error (not a GPU fault)."""
    from tritonforge.ops.fused_axpy import _axpy_kernel
    from tritonforge.kernel_utils import CachedLauncher

    launcher = CachedLauncher(_axpy_kernel)
    x, y = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
    out = torch.empty_like(x)
    for _ in range(2):  # compile, then the cached direct launch
        launcher((3,), x, y, out, 2.0, 3000, BLOCK=1024, ROUND_BF16=False)
    with pytest.raises(ValueError, match="cpu tensor"):
        launcher((3,), x.cpu(), y, out, 2.0, 3000, BLOCK=1024, ROUND_BF16=False)
    torch.cuda.synchronize()  # the context is intact
    torch.testing.assert_close(out, 2.0 * x + y)


@pytest.mark.gpu
def test_fast_launches_still_call_registered_launch_hooks():
    """A profiler's launch hooks (Proton registers them) must see every launch: with a hook
    registered the launcher goes through Triton's runner, not its own direct call."""
    import triton

    from tritonforge.ops.fused_axpy import _axpy_kernel
    from tritonforge.kernel_utils import CachedLauncher

    seen = []
    hook = lambda metadata: seen.append(metadata.get()["name"])  # noqa: E731
    launcher = CachedLauncher(_axpy_kernel)
    x, y = torch.randn(3000, device="cuda"), torch.randn(3000, device="cuda")
    launcher((3,), x, y, torch.empty_like(x), 2.0, 3000, BLOCK=1024, ROUND_BF16=False)  # compiles: no hook yet
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        for _ in range(3):
            out = torch.full_like(x, float("nan"))
            launcher((3,), x, y, out, 2.0, 3000, BLOCK=1024, ROUND_BF16=False)
            torch.testing.assert_close(out, 2.0 * x + y)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    assert seen == ["_axpy_kernel"] * 3


@pytest.mark.gpu
def test_cached_launches_stay_correct_when_the_specialization_changes():
    """Alternate aligned and misaligned views, row strides that are and aren't multiples of 16,
    N = 1: every call must match the reference, so no binary is reused for the wrong case."""
    torch.manual_seed(0)
    big = torch.randn(70, 4100, device="cuda")
    cases = [(0, 4096), (1, 4096), (0, 4095), (3, 1000), (0, 1), (4, 64), (1, 4096), (0, 4096)]
    for offset, n in cases * 2:
        x = big[3:67, offset : offset + n]  # row stride 4100 (not a multiple of 16)
        for view in (x, x.contiguous()):
            w = torch.randn(n, device="cuda")
            y, _ = rms_norm_fwd(view, w, 1e-6)
            assert_within_budget(y, rms_norm_ref(view, w, upcast=True), rms_norm_ref(view, w))
    assert tfg.rms_norm(big[:, 1:], torch.ones(4099, device="cuda")).shape == (70, 4099)


@pytest.mark.gpu
def test_cached_launcher_skips_the_jit_after_the_first_launch():
    from tritonforge.ops.fused_axpy import _axpy_kernel
    from tritonforge.kernel_utils import CachedLauncher, _triton_version

    class CountingKernel:
        arg_names = _axpy_kernel.arg_names
        calls = 0

        def __getitem__(self, grid):
            CountingKernel.calls += 1
            return _axpy_kernel[grid]

    launcher = CachedLauncher(CountingKernel())
    x, y = torch.randn(5000, device="cuda"), torch.randn(5000, device="cuda")
    for _ in range(3):
        out = torch.full_like(x, float("nan"))
        launcher((5,), x, y, out, 2.0, 5000, BLOCK=1024, ROUND_BF16=False)
        torch.testing.assert_close(out, 2.0 * x + y)
    fast = _triton_version().startswith(CachedLauncher.FAST_PATH_TRITON)
    assert CountingKernel.calls == (1 if fast else 3)


def test_launch_key_keeps_every_constexpr_value():
    """Constexprs are compiled in: BLOCK=64 and BLOCK=4096 must never share a binary (they once did,
    when the key classified constexpr ints like runtime ints: found on the H200)."""
    from tritonforge._triton import tl
    from tritonforge.kernel_utils import CachedLauncher

    x = torch.empty(16)
    base = CachedLauncher.key((x, 64), dict(BLOCK=64, ACC=tl.float32, num_warps=4))
    assert base == CachedLauncher.key((x, 4096), dict(BLOCK=64, ACC=tl.float32, num_warps=4))  # runtime ints: same class
    for changed in (dict(BLOCK=4096, ACC=tl.float32, num_warps=4), dict(BLOCK=64, ACC=tl.float64, num_warps=4),
                    dict(BLOCK=64, ACC=tl.float32, num_warps=8)):  # fmt: skip
        assert CachedLauncher.key((x, 64), changed) != base
