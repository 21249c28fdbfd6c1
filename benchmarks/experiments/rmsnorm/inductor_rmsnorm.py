"""What torch.compile generates for the Hugging Face RMSNorm on this GPU: run with
TORCH_LOGS=output_code and keep stderr (the kernels, and Inductor's cached best_config files).
Prints one line per shape to stdout (the compiled function's error against float64).

Usage (CUDA GPU, repository root):
    TORCH_LOGS=output_code python benchmarks/experiments/rmsnorm/inductor_rmsnorm.py 2> inductor.log
Toy run (one tiny shape; on a CPU Inductor writes C++, not Triton):
    TRITONFORGE_SMOKE=1 TORCH_LOGS=output_code python benchmarks/experiments/rmsnorm/inductor_rmsnorm.py
"""

import torch

from smoke import DEVICE, synchronize, toy  # first: imports tritonforge before triton
from tritonforge import bench

CASES = toy(((torch.bfloat16, 4096, 8192), (torch.float32, 1, 8192), (torch.bfloat16, 16384, 4096)),
            ((torch.float32, 3, 96),))  # fmt: skip
for dtype, m, n in CASES:
    x, w = bench.rmsnorm_inputs(m, n, dtype, DEVICE)
    fn = bench.compile_fresh(bench.hf_llama_rms_norm)
    y = fn(x, w, 1e-6)
    synchronize()
    print(f"{bench.dtype_name(dtype)} {m}x{n}: compiled, max rel err vs float64 {bench.relative_error(y, bench.rmsnorm_reference(x, w)):.1e}")
