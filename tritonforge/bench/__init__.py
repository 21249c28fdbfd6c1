"""The benchmark harness: time a kernel beside its peers and say how close it gets to the roof.

Every number it reports answers one question: *what fraction of what this GPU can do did the op
reach?* So each run measures the ceilings first, in the same process (copy bandwidth, matmul
rate); checks each implementation against float64 before timing it (a wrong row is not timed);
times it with ``triton.testing.do_bench`` (median, L2 flushed before each rep) and, for the ops,
device time through ``triton.testing.do_bench_cudagraph``; and divides an explicit cost formula
by the time. Never a bare "×faster".

Modules, in the order they import one another:

==============  ================================================================================
``costs``       bytes/FLOP formulas (:class:`Cost`), :func:`time_floor_us`, the measured
                :class:`Ceilings` and the fraction of them a row reaches
``timing``      the clocks (:func:`do_bench_timer`, :func:`device_time_us`) and :func:`measure`:
                checked against float64, then timed
``peers``       what a user would run instead: the HF Llama formula, ``F.rms_norm``,
                ``torch.compile`` (fresh per shape; on a GPU also under CUDA graphs), Liger
``report``      the markdown tables
``results``     the one results schema: rows, provenance, write, read (loudly), the newest
                recorded results of a suite (:func:`load_results`); it imports no suite
``suites``      the ceilings, :class:`OpSpec` per op (``axpy``, ``rmsnorm``, ``rmsnorm-bwd``),
                :func:`run_op_suite` that runs any spec, the eager-RMSNorm profile, :func:`run_suite`
``book``        what a chapter plots, :func:`results_for_chapter`: a live quick run on a GPU (or
                a simulated one), the record otherwise
``cli``         ``python -m tritonforge.bench {ceilings,axpy,rmsnorm,rmsnorm-bwd,
                profile-eager-rmsnorm,all,show}``
==============  ================================================================================

The harness imports the ops, the runtime and the references; no op imports the harness. Plots
and the roofline model live in :mod:`tritonforge.book`. Without a CUDA GPU nothing is timed: the
command says so and points to the recorded results (``benchmarks/results``, schema in
``benchmarks/README.md``), because the CPU interpreter would time the interpreter.
"""

from tritonforge.bench.costs import (  # noqa: I001  (the docstring's order: each module imports only the ones above it)
    Ceilings,
    Cost,
    add_throughput,
    axpy_bytes,
    axpy_cost,
    copy_bytes,
    copy_cost,
    dtype_name,
    elem_size,
    matmul_cost,
    matmul_flops,
    rmsnorm_forward_backward_bytes,
    rmsnorm_forward_backward_cost,
    rmsnorm_forward_bytes,
    rmsnorm_forward_cost,
    time_floor_us,
)
from tritonforge.bench.timing import (
    Timer,
    describe_exception,
    device_time_us,
    do_bench_flushes_l2,
    do_bench_timer,
    measure,
    relative_error,
)
from tritonforge.bench.peers import (
    AXPY_ALPHA,
    COMPILED_CUDA_GRAPHS,
    CUDA_GRAPH_IMPLS,
    RMSNORM_EPS,
    TORCH_COMPILE_CUDA_GRAPHS,
    compile_cuda_graphs,
    compile_fresh,
    functional_rms_norm,
    hf_llama_rms_norm,
    liger_version,
    load_liger_rms_norm,
    rmsnorm_implementations,
)
from tritonforge.bench.report import Table, format_results, format_suite, full_tensor_passes, kernel_summary, shape_label
from tritonforge.bench.results import (
    DEFAULT_RESULTS_DIR,
    GIT_COMMIT_ENV,
    METADATA_KEYS,
    RECORD_KINDS,
    REPO_ROOT,
    ROW_FIELDS,
    SCHEMA,
    SUITES,
    Results,
    collect_metadata,
    default_results_path,
    device_slug,
    git_state,
    json_safe,
    load_results,
    make_row,
    read_record,
    read_results,
    results_directory,
    rows_lost,
    validate_results,
    write_results,
)
from tritonforge.bench.suites import (
    AXPY,
    COPY_BYTES,
    OP_SPECS,
    RMSNORM_FORWARD,
    RMSNORM_FORWARD_BACKWARD,
    RMSNORM_SHAPES,
    SAME_SIZE_COPY,
    OpSpec,
    checked,
    default_dtypes,
    measure_copy,
    profile_one_call,
    rmsnorm_inputs,
    rmsnorm_reference,
    run_ceilings,
    run_op_suite,
    run_profile_eager_rmsnorm,
    run_suite,
    summarize_kernels,
)
from tritonforge.bench.book import results_for_chapter
from tritonforge.bench.cli import main, parse_dtypes, parse_shapes
from tritonforge.reference import TOLERANCE, rms_norm_ref  # noqa: F401  (names the experiments use)
