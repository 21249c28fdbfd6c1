"""The suites on a CPU, with a fake timer: each row is checked against float64 before it is
timed, wrong rows are not timed, and the fractions follow the formulas (tritonforge.bench.suites).
The real suites run only on a GPU (the tests marked gpu at the end)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tritonforge import bench
from tritonforge.bench import costs
from tritonforge.bench.costs import dtype_name
from tritonforge.reference import flash_attention_ref

from .fakes import FakeTimer

# ----------------------------------------------------------------------------------------------
# The generic runner, on a toy op
# ----------------------------------------------------------------------------------------------


def toy_implementations(impls=None, *, cuda_graphs=False):
    table = {
        "good": lambda: (lambda x, s: x * s),
        "planted-wrong": lambda: (lambda x, s: x * (s + 1)),
        "missing": "not installed here",
    }
    return {name: maker for name, maker in table.items() if impls is None or name in impls}


TOY = bench.OpSpec(
    suite="toy",
    op="scale",
    shapes=((3, 5), (1, 7)),
    quick_shapes=((1, 7),),
    make_inputs=lambda shape, dtype, device: {"x": torch.randn(*shape, dtype=dtype, device=device), "s": 2.0},
    call=lambda fn, inputs: fn(inputs["x"], inputs["s"]),
    reference=lambda x, s: x * s,
    cost=lambda shape, dtype: bench.Cost(2 * shape[0] * shape[1] * bench.elem_size(dtype), None, "bytes = 2·M·N·elem", "copy"),
    implementations=toy_implementations,
    routed_op="scale",
    device_time=True,
)


def test_the_runner_runs_a_toy_spec_on_cpu():
    timer = FakeTimer(us=4.0)
    seen = []

    def device_timer(fn, grad_to_none=None):
        seen.append(fn)
        return 1.0

    rows = bench.run_op_suite(TOY, bench.Ceilings(0.01, {}), dtypes=[torch.float32], device="cpu", timer=timer,
                              device_timer=device_timer)  # fmt: skip
    assert [(r["impl"], r["shape"]) for r in rows] == [
        (impl, shape) for shape in ([3, 5], [1, 7]) for impl in ("good", "planted-wrong", "missing")
    ]
    by_status = {r["impl"]: r["status"] for r in rows}
    assert by_status == {"good": "ok", "planted-wrong": "wrong", "missing": "unavailable"}
    good = [r for r in rows if r["impl"] == "good"]
    assert all(r["suite"] == "toy" and r["op"] == "scale" and r["max_rel_err"] == 0.0 for r in good)
    assert [r["device_us"] for r in good] == [1.0, 1.0] and len(seen) == 2
    assert good[0]["bytes"] == 2 * 15 * 4 and good[0]["fraction_of_ceiling"] == pytest.approx(120 / 4e-6 / 1e9 / 0.01)
    assert timer.calls == 2  # only the correct rows were timed
    assert [r["note"] for r in rows if r["impl"] == "missing"] == ["not installed here"] * 2
    quick = bench.run_op_suite(TOY, None, dtypes=[torch.float32], impls=["good"], quick=True, device="cpu", timer=timer)
    assert [r["shape"] for r in quick] == [[1, 7]] and quick[0]["device_us"] is None  # no device timer given


def test_the_runner_checks_every_gradient_of_a_backward_spec():
    def implementations(impls=None, *, cuda_graphs=False):
        return {
            "good": lambda: (lambda x, w: x * x * w),
            "wrong-dx": lambda: (lambda x, w: x.detach() * x * w),  # half of dx missing
        }

    spec = dataclasses.replace(
        TOY,
        make_inputs=lambda shape, dtype, device: {"x": torch.randn(*shape, dtype=dtype), "w": torch.randn(shape[-1], dtype=dtype),
                                                  "dy": torch.randn(*shape, dtype=dtype)},  # fmt: skip
        call=lambda fn, inputs: fn(inputs["x"], inputs["w"]),
        reference=lambda x, w: x * x * w,
        implementations=implementations,
        backward=True,
        grads=("x", "w"),
        device_time=False,
    )
    timer = FakeTimer()
    rows = bench.run_op_suite(spec, None, dtypes=[torch.float64], shapes=[(4, 6)], device="cpu", timer=timer)
    status = {r["impl"]: r for r in rows}
    assert status["good"]["status"] == "ok" and status["good"]["max_rel_err"] < 1e-12
    assert status["wrong-dx"]["status"] == "wrong" and status["wrong-dx"]["max_rel_err"] == pytest.approx(0.5, abs=0.01)
    assert timer.calls == 1


# ----------------------------------------------------------------------------------------------
# The op suites' specs
# ----------------------------------------------------------------------------------------------


def test_each_op_suite_is_a_spec_in_the_registry():
    assert set(bench.OP_SPECS) == {"axpy", "rmsnorm", "rmsnorm-bwd", "swiglu", "swiglu-bwd", "swiglu-front", "softmax", "softmax-bwd",
                                   "attention", "attention-decode", "attention-bwd"}  # fmt: skip
    assert set(bench.OP_SPECS) | {"ceilings", "profile-eager-rmsnorm"} == set(bench.SUITES)
    forward, both = bench.RMSNORM_FORWARD, bench.RMSNORM_FORWARD_BACKWARD
    assert not forward.backward and both.backward and both.grads == ("x", "weight")
    assert forward.device_time and both.device_time and not bench.AXPY.device_time
    assert bench.SAME_SIZE_COPY in forward.baselines and not both.baselines


def test_swiglu_specs():
    """Forward: 3·M·F elements moved, forward + backward 8·M·F, each beside a copy of as many bytes;
    the MLP front 16-bit only, its fraction of copy bandwidth at decode and of the matmul rate at prefill."""
    forward, both, front = bench.OP_SPECS["swiglu"], bench.OP_SPECS["swiglu-bwd"], bench.OP_SPECS["swiglu-front"]
    assert forward.cost((64, 100), torch.bfloat16).bytes == 3 * 64 * 100 * 2
    assert both.cost((64, 100), torch.float32).bytes == 8 * 64 * 100 * 4 and both.grads == ("gate", "up")
    assert bench.SAME_SIZE_COPY in forward.baselines and bench.SAME_SIZE_COPY in both.baselines
    assert front.sixteen_bit_only and not forward.sixteen_bit_only
    assert front.cost((64, 4096, 14336), torch.bfloat16).ceiling == "copy"
    assert front.cost((4096, 4096, 14336), torch.bfloat16).ceiling == "matmul"
    assert front.cost((1, 4096, 14336), torch.bfloat16).bytes == (2 * 4096 * 14336 + 4096 + 14336) * 2


def test_softmax_suites_run_on_this_machine(device):
    for name in ("softmax", "softmax-bwd"):
        rows = bench.run_op_suite(bench.OP_SPECS[name], bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(5, 70)],
                                  impls=["tritonforge", "hf-eager", bench.SAME_SIZE_COPY], device=device, timer=FakeTimer())  # fmt: skip
        assert [r["impl"] for r in rows][:2] == ["tritonforge", "hf-eager"], name
        assert all(row["status"] == "ok" for row in rows), [(r["impl"], r["note"]) for r in rows]
    assert bench.OP_SPECS["softmax"].cost((4, 100), torch.bfloat16).bytes == 2 * 4 * 100 * 2
    assert bench.OP_SPECS["softmax-bwd"].cost((4, 100), torch.float32).bytes == 5 * 4 * 100 * 4


def test_swiglu_suites_run_on_this_machine(device):
    """Every row of the three SwiGLU suites is checked against float64 and timed (fake timer)."""
    for name, shape, dtype in (("swiglu", (5, 70), torch.float32), ("swiglu-bwd", (5, 70), torch.float32),
                               ("swiglu-front", (3, 32, 24), torch.float16 if device == "cuda" else torch.float32)):  # fmt: skip
        rows = bench.run_op_suite(bench.OP_SPECS[name], bench.Ceilings(100.0, {}), dtypes=[dtype], shapes=[shape],
                                  impls=["tritonforge", "hf-eager", bench.SAME_SIZE_COPY], device=device, timer=FakeTimer())  # fmt: skip
        assert [r["impl"] for r in rows][:2] == ["tritonforge", "hf-eager"], name
        for row in rows:
            assert row["status"] == "ok", (name, row["impl"], row["note"])


@pytest.mark.parametrize("spec", list(bench.OP_SPECS.values()), ids=list(bench.OP_SPECS))
def test_compiled_cuda_graph_rows_only_on_a_gpu(spec):
    """The reduce-overhead rows are listed for a CUDA device and never for a CPU one (nothing here
    compiles: the table holds makers)."""
    on_cpu = spec.impl_table(None, "cpu")
    assert not set(bench.CUDA_GRAPH_IMPLS) & set(on_cpu)
    on_gpu = spec.impl_table(None, "cuda")
    if spec.suite not in ("axpy", "swiglu-bwd", "softmax-bwd", "attention", "attention-decode", "attention-bwd"):
        assert [name for name in on_gpu if name not in bench.CUDA_GRAPH_IMPLS] == list(on_cpu)
        assert set(on_gpu) - set(on_cpu) == set(bench.CUDA_GRAPH_IMPLS)
    else:
        assert not set(bench.CUDA_GRAPH_IMPLS) & set(on_gpu)


def test_axpy_suite_bookkeeping(device):
    timer = FakeTimer()
    rows = bench.run_op_suite(bench.AXPY, bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(1000,)],
                              impls=["tritonforge", "eager"], device=device, timer=timer)  # fmt: skip
    assert [r["impl"] for r in rows] == ["tritonforge", "eager"]
    for row in rows:
        assert row["status"] == "ok", row["note"]
        assert row["shape"] == [1000] and row["bytes"] == 3 * 1000 * 4 and row["max_rel_err"] < 1e-6
        assert row["fraction_of_ceiling"] == pytest.approx(12000 / 10e-6 / 1e9 / 100.0)
        assert row["device_us"] is None
    assert timer.calls == 2


def test_rmsnorm_suites_on_cpu_check_every_peer():
    ceilings = bench.Ceilings(100.0, {})
    for spec in (bench.RMSNORM_FORWARD, bench.RMSNORM_FORWARD_BACKWARD):
        rows = bench.run_op_suite(spec, ceilings, dtypes=[torch.float32], shapes=[(3, 40)],
                                  impls=["hf-eager", "F.rms_norm", "liger"], device="cpu", timer=FakeTimer())  # fmt: skip
        by_impl = {r["impl"]: r for r in rows}
        for impl in ("hf-eager", "F.rms_norm"):
            assert by_impl[impl]["status"] == "ok", by_impl[impl]["note"]
            assert by_impl[impl]["max_rel_err"] < 1e-5
        if bench.liger_version() is None:
            assert by_impl["liger"]["status"] == "unavailable" and "liger" in by_impl["liger"]["note"]


def test_rmsnorm_rows_check_our_kernel(device):
    for spec in (bench.RMSNORM_FORWARD, bench.RMSNORM_FORWARD_BACKWARD):
        rows = bench.run_op_suite(spec, bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(2, 64)],
                                  impls=["tritonforge"], device=device, timer=FakeTimer())  # fmt: skip
        # Our kernel (interpreted on a CPU, compiled on a GPU) must pass the float64 check, under strict routing.
        assert rows[0]["status"] == "ok", rows[0]["note"]


def test_our_row_is_an_error_when_the_call_falls_back(monkeypatch, device):
    """Strict routing in the check: a row named tritonforge must time the kernel, not the reference
    (``device``: where the kernel runs here, so that only the patched route reports a fallback)."""
    from tritonforge import runtime

    monkeypatch.setattr(runtime, "last_path", lambda op: "torch")
    rows = bench.run_op_suite(bench.RMSNORM_FORWARD, None, dtypes=[torch.float32], shapes=[(2, 64)],
                              impls=["tritonforge", "hf-eager"], device=device, timer=FakeTimer())  # fmt: skip
    assert rows[0]["status"] == "error" and "fallback" in rows[0]["note"]
    assert rows[1]["status"] == "ok"


def test_forward_suite_measures_a_same_size_copy_at_every_shape(device):
    """The baseline row copies x's bytes and is checked like any implementation."""
    rows = bench.run_op_suite(bench.RMSNORM_FORWARD, bench.Ceilings(100.0, {}), dtypes=[torch.float32],
                              shapes=[(3, 40), (2, 64)], impls=["hf-eager", bench.SAME_SIZE_COPY], device=device,
                              timer=FakeTimer())  # fmt: skip
    copies = [r for r in rows if r["impl"] == bench.SAME_SIZE_COPY]
    assert [r["shape"] for r in copies] == [[3, 40], [2, 64]]
    for row in copies:
        assert row["op"] == "copy" and row["status"] == "ok" and row["max_rel_err"] == 0.0
        assert row["bytes"] == 2 * row["shape"][0] * row["shape"][1] * 4 and row["ceiling"] == "copy"
        assert row["suite"] == "rmsnorm" and row["device_us"] is None
    named = bench.run_op_suite(bench.RMSNORM_FORWARD, bench.Ceilings(100.0, {}), dtypes=[torch.float32],
                               shapes=[(3, 40)], impls=["hf-eager"], device=device, timer=FakeTimer())  # fmt: skip
    assert [r["impl"] for r in named] == ["hf-eager"]  # --impls without it leaves it out


# ----------------------------------------------------------------------------------------------
# Profile
# ----------------------------------------------------------------------------------------------


def test_summarize_kernels_counts_full_tensor_passes():
    from types import SimpleNamespace

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    m, n = 4, 8

    def op(name, shapes, kernels):
        launched = [SimpleNamespace(name=k) for k in kernels]
        return SimpleNamespace(name=name, device_type=cpu, input_shapes=shapes, kernels=launched)

    def kernel(name):
        return SimpleNamespace(name=name, device_type=cuda, input_shapes=[], kernels=[])

    events = [
        op("aten::copy_", [[m, n], [m, n], []], ["cast"]), kernel("cast"),
        op("aten::pow", [[m, n], []], ["pow"]), kernel("pow"),
        op("aten::mean", [[m, n], [], [], []], ["reduce"]), kernel("reduce"),
        op("aten::add", [[m, 1], []], ["add"]), kernel("add"),
        op("aten::rsqrt", [[m, 1]], ["rsqrt"]), kernel("rsqrt"),
        op("aten::mul", [[m, n], [m, 1]], ["mul"]), kernel("mul"),
        op("aten::lift", [[m, n]], []),  # no kernel launched: not a pass
    ]  # fmt: skip
    summary = bench.summarize_kernels(events, m * n)
    assert summary["kernel_count"] == 6
    assert summary["kernels"] == ["cast", "pow", "reduce", "add", "rsqrt", "mul"]
    assert summary["hbm_passes"] == 4
    assert bench.summarize_kernels([kernel("triton_fused")], m * n)["hbm_passes"] is None


def test_profiler_events_have_what_the_summary_reads():
    """A real torch.profiler trace (CPU only here: no kernels, so no passes can be estimated)."""
    x, weight = bench.rmsnorm_inputs(8, 16, torch.float32, "cpu")
    events = bench.profile_one_call(lambda: bench.hf_llama_rms_norm(x, weight))
    names = [e.name for e in events]
    assert "aten::pow" in names and "aten::rsqrt" in names
    assert bench.summarize_kernels(events, 8 * 16) == {
        "kernel_count": 0, "kernels": [], "hbm_passes": None, "kernels_mapped_to_aten_ops": 0,
    }  # fmt: skip


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without a CUDA GPU")
def test_run_suite_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="need a CUDA GPU"):
        bench.run_suite("ceilings")


# ----------------------------------------------------------------------------------------------
# On a GPU (skipped elsewhere): the suites run for real; correctness only, no timing asserted
# ----------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_quick_axpy_suite_on_gpu():
    results = bench.run_suite("axpy", quick=True, dtypes=[torch.float32], shapes=[(2**20,)], impls=["tritonforge", "eager"])
    assert results.live and results.ceilings.copy_gbps > 0
    axpy_rows = results.where(suite="axpy")
    assert [r["status"] for r in axpy_rows] == ["ok", "ok"], [r["note"] for r in axpy_rows]


@pytest.mark.gpu
def test_rmsnorm_suites_record_device_time_on_gpu():
    for spec in (bench.RMSNORM_FORWARD, bench.RMSNORM_FORWARD_BACKWARD):
        rows = bench.run_op_suite(spec, bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(64, 1024)],
                                  impls=["tritonforge", "F.rms_norm"], timer=bench.do_bench_timer(quick=True),
                                  device_timer=bench.device_time_us)  # fmt: skip
        for row in rows:
            assert row["status"] == "ok" and 0 < row["device_us"] < 1e4, (row["impl"], row["note"])


@pytest.mark.gpu
def test_rmsnorm_suites_time_the_cuda_graph_rows_on_gpu():
    for spec in (bench.RMSNORM_FORWARD, bench.RMSNORM_FORWARD_BACKWARD):
        rows = bench.run_op_suite(spec, bench.Ceilings(100.0, {}), dtypes=[torch.float32], shapes=[(64, 1024)],
                                  impls=list(bench.CUDA_GRAPH_IMPLS), timer=bench.do_bench_timer(quick=True),
                                  device_timer=bench.device_time_us)  # fmt: skip
        assert [r["impl"] for r in rows] == list(bench.CUDA_GRAPH_IMPLS)
        for row in rows:
            assert row["status"] == "ok" and row["us"] > 0 and row["device_us"] is None, (row["impl"], row["note"])


@pytest.mark.gpu
def test_profile_maps_eager_kernels_to_aten_ops_on_gpu():
    dtype = bench.default_dtypes("cuda", quick=True)[0]
    rows = bench.run_profile_eager_rmsnorm(None, dtypes=[dtype], shapes=[(256, 512)], impls=["hf-eager"])
    row = rows[0]
    assert row["status"] == "ok", row["note"]
    assert row["kernel_count"] >= 2 and len(row["kernels"]) == row["kernel_count"]
    assert row["hbm_passes"] is not None and 1 <= row["hbm_passes"] <= row["kernel_count"]


def test_attention_suites_run_on_this_machine(device, monkeypatch):
    """The attention suites at small sizes: ours and the eager peer checked against the chunked
    float64 oracle (chunks forced small here) and timed (fake timer)."""
    monkeypatch.setattr(bench.suites, "ORACLE_CHUNK_BYTES", 8 * 2 * 40 * 7)  # 7 query rows per chunk
    dtype = torch.float16 if device == "cuda" else torch.float32
    for name, shape in (("attention", (2, 2, 40, 16, 1)), ("attention", (1, 2, 33, 16, 0)), ("attention-decode", (2, 4, 2, 70, 16)),
                        ("attention-bwd", (2, 2, 40, 16, 1)), ("attention-bwd", (1, 2, 33, 16, 0))):  # fmt: skip
        rows = bench.run_op_suite(bench.OP_SPECS[name], bench.Ceilings(100.0, {dtype_name(dtype): 10.0}), dtypes=[dtype],
                                  shapes=[shape], impls=["tritonforge", "naive (eager)"], device=device, timer=FakeTimer())  # fmt: skip
        assert [r["impl"] for r in rows] == ["tritonforge", "naive (eager)"], name
        for row in rows:
            assert row["status"] == "ok", (name, row["impl"], row["note"])
            assert row["max_rel_err"] < 1e-5 or dtype != torch.float32


def test_attention_oracle_chunks_agree_with_the_whole(monkeypatch):
    """The oracle's query chunks give the whole call's float64 result to a few ulps: the matmuls
    see other batch shapes and may sum in another order (a bound of 1e-15, 4.5 ulps of 1, failed
    once by 1.11e-15 at a fresh seed)."""
    q, k, v = torch.randn(2, 3, 23, 8), torch.randn(2, 3, 31, 8), torch.randn(2, 3, 31, 8)
    for causal in (False, True):
        whole = flash_attention_ref(q, k, v, causal, upcast=True)[0]
        monkeypatch.setattr(bench.suites, "ORACLE_CHUNK_BYTES", 8 * 3 * 31 * 5)  # 5 rows per chunk
        chunked = bench.suites.attention_oracle(q, k, v, causal)
        torch.testing.assert_close(chunked, whole, rtol=0, atol=16 * torch.finfo(torch.float64).eps * whole.abs().max().item())
        monkeypatch.undo()


def test_attention_costs():
    """Prefill FLOPs count the pairs a query sees (causal: N(N+1)/2 of N²), decode bytes the KV cache."""
    prefill = bench.OP_SPECS["attention"]
    full = prefill.cost((4, 32, 2048, 128, 0), torch.bfloat16)
    causal = prefill.cost((4, 32, 2048, 128, 1), torch.bfloat16)
    assert full.flops == 4 * 4 * 32 * 2048 * 2048 * 128 and full.ceiling == "matmul"
    assert causal.flops == 4 * 4 * 32 * 128 * 2048 * 2049 // 2
    decode = bench.OP_SPECS["attention-decode"].cost((1, 32, 8, 8192, 128), torch.bfloat16)
    assert decode.bytes == (2 * 8 * 8192 * 128 + 2 * 32 * 128) * 2 and decode.ceiling == "copy"
    step = bench.OP_SPECS["attention-bwd"].cost((4, 32, 2048, 128, 1), torch.bfloat16)
    assert step.flops == 7 * causal.flops // 2 and step.bytes == 3 * causal.bytes and step.ceiling == "matmul"
    assert costs.causal_pairs(3, 7) == 5 + 6 + 7 and costs.causal_pairs(7, 3) == 1 + 2 + 3 and costs.causal_pairs(0, 5) == 0


FAKE_TUTORIAL = '''
import torch

calls = []


def attention(q, k, v, causal, sm_scale):  # the tutorial's signature; float32 math for the check
    calls.append((q.dtype, causal, sm_scale))
    out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, scale=sm_scale)
    return out.to(q.dtype)
'''


def test_the_triton_tutorial_peer_serves_only_what_it_was_written_for(tmp_path, monkeypatch):
    """Triton's tutorial is loaded from the file the machine is given (here a stand-in with its
    signature): float16 rows are checked and timed; other dtypes, grouped heads and decode are
    ``unavailable`` with the reason, not errors; no file, or one that fails to import, says why."""
    monkeypatch.setenv(bench.peers.TRITON_TUTORIAL_ENV, str(tmp_path / "absent.py"))
    rows = bench.run_op_suite(bench.OP_SPECS["attention"], None, dtypes=[torch.float16], shapes=[(1, 2, 128, 16, 1)],
                              impls=["triton-tutorial"], device="cpu", timer=FakeTimer())  # fmt: skip
    assert rows[0]["status"] == "unavailable" and "fetch_peers.sh" in rows[0]["note"]
    (tmp_path / "broken.py").write_text("raise ImportError('needs a GPU driver')\n")
    assert "needs a GPU driver" in bench.peers.load_triton_tutorial_attention(str(tmp_path / "broken.py"))[1]

    (tmp_path / "tutorial.py").write_text(FAKE_TUTORIAL)
    monkeypatch.setenv(bench.peers.TRITON_TUTORIAL_ENV, str(tmp_path / "tutorial.py"))
    cases = ((bench.OP_SPECS["attention"], torch.float16, (1, 2, 128, 16, 1), "ok", None),
             (bench.OP_SPECS["attention-bwd"], torch.float16, (1, 2, 128, 16, 0), "ok", None),
             (bench.OP_SPECS["attention"], torch.float32, (1, 2, 128, 16, 1), "unavailable", "float16 only"),
             (bench.OP_SPECS["attention"], torch.float16, (1, 2, 96, 16, 0), "unavailable", "multiple of 128"),
             (bench.OP_SPECS["attention-decode"], torch.float16, (1, 4, 2, 128, 16), "unavailable", "grouped heads"))  # fmt: skip
    for spec, dtype, shape, status, reason in cases:
        row = bench.run_op_suite(spec, None, dtypes=[dtype], shapes=[shape], impls=["triton-tutorial"], device="cpu",
                                 timer=FakeTimer())[0]  # fmt: skip
        assert row["status"] == status, (spec.suite, dtype, shape, row["note"])
        assert reason is None or reason in row["note"]
