"""The simulated T4 (``TRITONFORGE_SIMULATE_DEVICE=t4``, or ``simulation.simulate("t4")``): the package
reports and decides as on a Colab T4 while tensors stay on the CPU; and the decisions a chapter's
live branch makes (which dtypes were measured, which key to read, which datasheet to compare
with) are package functions, tested here for a T4 directly."""

import os
import subprocess
import sys

import pytest
import torch

import tritonforge as tfg
from tritonforge import bench, hardware, runtime, simulation
from tritonforge.bench.suites import simulated_run
from tritonforge.book import roofline

import triton  # noqa: I001  (after tritonforge: the interpreter flag first)
import triton.language as tl

T4 = simulation.SIMULATED_DEVICES["t4"]


def test_environment_reports_a_simulated_t4():
    with simulation.simulate("t4"):
        env = tfg.environment()
    assert env.simulated and env.gpu == "Tesla T4"
    assert "simulated" in env.device and env.device.startswith("Tesla T4")
    assert env.compute_capability.startswith("7.5")
    assert env.bf16 is False and env.default_dtype == torch.float16
    assert torch.bfloat16 not in env.dtypes and torch.float16 in env.dtypes
    assert env.device_type == "cpu"  # tensors stay on the CPU
    assert env.benchmarks_live  # the chapters' live branches run
    assert any("simulated" in note for note in env.notes)


def test_no_simulation_without_the_switch():
    with simulation.simulate(None):
        env = tfg.environment()
        assert simulation.simulated_device() is None
    assert not env.simulated
    assert env.benchmarks_live == torch.cuda.is_available()


def test_the_environment_variable_switches_it_on_in_a_fresh_process():
    code = "import tritonforge as tfg; e = tfg.environment(); print(e.gpu, e.compute_capability, e.bf16, e.default_dtype)"
    env = dict(os.environ, TRITONFORGE_SIMULATE_DEVICE="t4", TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Tesla", "T4", "7.5", "(sm_75)", "False", "torch.float16"]


def test_an_unknown_device_is_an_error_not_a_silent_default():
    env = dict(os.environ, TRITONFORGE_SIMULATE_DEVICE="v100", TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", "import tritonforge"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "TRITONFORGE_SIMULATE_DEVICE" in proc.stderr


def test_runtime_limits_are_the_t4s():
    cpu = torch.device("cpu")
    with simulation.simulate("t4"):
        assert hardware.device_capability(cpu) == (7, 5)
        assert hardware.supports_bf16(cpu) is False
        assert hardware.shared_memory_per_block(cpu) == 64 * 1024
        assert "sm_75" in hardware.bf16_unsupported(torch.bfloat16, cpu)
        assert hardware.bf16_unsupported(torch.float16, cpu) is None
    assert hardware.supports_bf16(cpu) is True  # back to the CPU's answer


ON_THE_INTERPRETER = pytest.mark.skipif(
    not hardware.interpreting(), reason="the simulation runs kernels in the interpreter on CPU tensors (a machine without a GPU)"
)


@ON_THE_INTERPRETER
def test_routing_refuses_bf16_as_on_a_t4():
    x = torch.randn(4, 40, dtype=torch.bfloat16)
    w = torch.randn(40, dtype=torch.bfloat16)
    with simulation.simulate("t4"):
        with pytest.raises(tfg.FallbackError, match="sm_75"):
            tfg.rms_norm(x, w)  # the suite runs strict
        with runtime.strict(False), pytest.warns(tfg.FallbackWarning, match="sm_75"):
            tfg.rms_norm(x, w)
        assert tfg.last_route("rms_norm").reason == "unsupported"
        tfg.rms_norm(x.half(), w.half())
        assert tfg.last_path("rms_norm") == "interpreter"


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@ON_THE_INTERPRETER
def test_a_bf16_kernel_launched_by_hand_is_refused_on_a_simulated_sm75():
    """A real T4 would compile and run it (Triton emulates bf16 there); the book's rule is that no
    bf16 kernel runs below sm_80, and the simulation enforces it for hand launches too."""
    x = torch.randn(10).to(torch.bfloat16)
    y = torch.empty_like(x)
    with simulation.simulate("t4"):
        with pytest.raises(simulation.SimulatedCompileError, match="sm_75"):
            _copy_kernel[(1,)](x, y, 10, BLOCK=16)
        _copy_kernel[(1,)](x.half(), y.half(), 10, BLOCK=16)  # float16 compiles on a T4
    _copy_kernel[(1,)](x, y, 10, BLOCK=16)  # no simulation: the interpreter runs bf16
    assert torch.equal(x, y)


# The decisions of the chapters' live branches ---------------------------------------------------


def test_a_t4_quick_run_measures_float16_only():
    with simulation.simulate("t4"):
        assert bench.default_dtypes("cuda", quick=True) == [torch.float16]
        assert bench.default_dtypes("cuda") == [torch.float32, torch.float16]
        results = bench.results_for_chapter("ceilings", live=True)
    assert results.live and results.metadata["simulated"]
    assert set(results.ceilings.matmul_tflops) == {"float16"}  # reading "bfloat16" is the KeyError a T4 met
    assert results.ceilings.half_dtype == "float16"
    assert results.ceilings.ridge_point() == pytest.approx(T4.matmul_tflops["float16"] * 1e3 / T4.copy_gbps)
    assert "SIMULATED" in results.provenance() and "Tesla T4" in results.provenance()


def test_half_dtype_prefers_bfloat16_where_measured():
    assert bench.Ceilings(4000.0, {"bfloat16": 700.0, "float16": 690.0, "float32": 50.0}).half_dtype == "bfloat16"
    assert bench.Ceilings(300.0, {"float16": 40.0}).half_dtype == "float16"
    with pytest.raises(ValueError, match="no 16-bit"):
        _ = bench.Ceilings(300.0, {"float32": 8.0}).half_dtype


@pytest.mark.parametrize("suite", ["rmsnorm", "rmsnorm-bwd", "axpy"])
def test_simulated_op_suites_have_a_t4s_rows(suite):
    with simulation.simulate("t4"):
        results = bench.results_for_chapter(suite, live=True)
    bench.validate_results(results.to_dict())
    assert {row["suite"] for row in results.rows} == {suite}
    assert {row["dtype"] for row in results.rows} == {"float16"}
    ok = results.where(status="ok")
    assert ok and all(row["us"] > 0 and row["fraction_of_ceiling"] > 0 for row in ok)


def test_simulated_run_is_usable_by_the_plots():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tritonforge.book import viz

    results = simulated_run("rmsnorm", T4)
    plt.close(viz.plot_bench(results, op="rmsnorm"))
    fig, ax = plt.subplots()
    viz.roofline(ax, results.ceilings, [], dtypes=[results.ceilings.half_dtype])
    plt.close(fig)


def test_datasheet_is_the_devices_own():
    assert roofline.datasheet_key("NVIDIA H200") == "H200"
    assert roofline.datasheet_key("Tesla T4") == "T4"
    assert roofline.datasheet_key("NVIDIA A100-SXM4-80GB") == "A100"
    assert roofline.datasheet_key("NVIDIA H100 80GB HBM3") == "H100"
    assert roofline.datasheet_key("NVIDIA GeForce RTX 4090") is None
    assert roofline.datasheet_for("Tesla T4") is roofline.DEVICES["T4"]
    t4_copy = roofline.percent_of_datasheet(240.0, "Tesla T4", "bandwidth")
    assert t4_copy == "(75% of the T4 datasheet)" and "H200" not in t4_copy
    assert "T4 datasheet" in roofline.percent_of_datasheet(25.0, "Tesla T4", "matmul", "float16")
    assert "no bf16" in roofline.percent_of_datasheet(25.0, "Tesla T4", "matmul", "bfloat16")
    assert "no datasheet" in roofline.percent_of_datasheet(900.0, "NVIDIA GeForce RTX 4090", "bandwidth")
    assert "H200" in roofline.percent_of_datasheet(4300.0, "NVIDIA H200", "bandwidth")


def test_backward_config_on_a_t4_is_unpipelined(monkeypatch):
    """The configuration code a T4 reaches (the compiled path): no cp.async below sm_80, so no
    software pipelining, whatever the shared memory (64 KB there)."""
    from tritonforge.ops import rmsnorm_backward

    monkeypatch.setattr(hardware, "interpreting", lambda: False)  # as on the GPU: the interpreter has no pipeline
    cuda = torch.device("cuda", 0)
    with simulation.simulate("t4"):
        assert hardware.shared_memory_per_block(cuda) == 64 * 1024
        assert rmsnorm_backward.bwd_stages(1024, torch.float16, cuda) == 1


def test_importing_the_package_patches_nothing_even_when_simulating():
    """STYLE rule 5: no symbol swapping at import. Under ``TRITONFORGE_SIMULATE_DEVICE=t4`` the guard on
    hand launches is installed when the simulation is first consulted, not when tritonforge is imported."""
    import subprocess
    import sys

    code = (
        "import tritonforge\n"
        "from triton.runtime.interpreter import InterpretedFunction\n"
        "before = InterpretedFunction.__getitem__\n"
        "from tritonforge import simulation\n"
        "assert simulation.simulated_device().key == 't4'\n"
        "print(before is InterpretedFunction.__getitem__)\n"
    )
    env = {**__import__("os").environ, "TRITONFORGE_SIMULATE_DEVICE": "t4", "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"  # patched by the first consultation, not by the import
