"""What torch.compile generates for the Hugging Face RMSNorm on this GPU: run with
TORCH_LOGS=output_code and keep stderr (the kernels, and Inductor's cached best_config files).

Usage (CUDA GPU, repository root):
    TORCH_LOGS=output_code python benchmarks/experiments/inductor_rmsnorm.py 2> inductor.log
"""
import torch
from tritonforge import bench
for dtype, m, n in ((torch.bfloat16, 4096, 8192), (torch.float32, 1, 8192), (torch.bfloat16, 16384, 4096)):
    x, w = bench.rmsnorm_inputs(m, n, dtype, "cuda")
    fn = bench.compile_fresh(bench.hf_llama_rms_norm)
    fn(x, w, 1e-6)
    torch.cuda.synchronize()
