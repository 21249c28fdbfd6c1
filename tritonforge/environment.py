"""The environment report: the first cell of every chapter says what this machine will run."""

from __future__ import annotations

import dataclasses
import platform
from typing import Optional

import torch

from tritonforge import _triton, hardware, runtime, simulation


@dataclasses.dataclass(frozen=True)
class Environment:
    """What this machine will run: see :func:`environment`."""

    path: str
    device: str
    compute_capability: Optional[str]
    bf16: bool
    default_dtype: torch.dtype
    torch_version: str
    triton_version: Optional[str]
    python_version: str
    strict: bool
    notes: tuple[str, ...] = ()
    gpu: Optional[str] = None  # the GPU's name as the driver gives it ("NVIDIA H200", "Tesla T4"), None without one
    simulated: bool = False  # TRITONFORGE_SIMULATE_DEVICE: the gpu is pretended, tensors stay on the CPU

    @property
    def device_type(self) -> str:
        """``"cuda"`` on the triton path, else ``"cpu"``: where a chapter puts its tensors."""
        return "cuda" if self.path == "triton" else "cpu"

    @property
    def benchmarks_live(self) -> bool:
        """Whether a chapter's benchmark cells measure here (a CUDA GPU; or, under the simulation,
        the simulated quick run that stands in for one) rather than plot the recorded results."""
        return self.simulated or (self.path == "triton" and torch.cuda.is_available())

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """The float dtypes this device's kernels run: float32, float16, and bfloat16 where it has it."""
        return (torch.float32, torch.float16) + ((torch.bfloat16,) if self.bf16 else ())

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("execution path", self.path),
            ("device", self.device),
            ("compute capability", self.compute_capability or "-"),
            ("bf16 kernels", "yes" if self.bf16 else "no"),
            ("default dtype", str(self.default_dtype).replace("torch.", "")),
            ("torch", self.torch_version),
            ("triton", self.triton_version or "not installed"),
            ("python", self.python_version),
            ("strict routing", "on" if self.strict else "off"),
        ] + [("note", n) for n in self.notes]

    def __str__(self) -> str:
        width = max(len(k) for k, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {v}" for k, v in self.rows())

    def _repr_html_(self) -> str:
        body = "".join(f"<tr><th style='text-align:left'>{k}</th><td style='text-align:left'>{v}</td></tr>" for k, v in self.rows())
        return f"<table>{body}</table>"

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython's plain-text display
        printer.text(str(self))


def environment() -> Environment:
    """Report the path kernels will take here, the device, its capability and dtypes.

    Call it in a notebook's first cell: a reader sees at once whether this run compiles Triton
    kernels for a GPU, interprets them on the CPU, or falls back to PyTorch.
    """
    notes: list[str] = []
    triton_version = getattr(_triton.triton, "__version__", None) if _triton.HAVE_TRITON else None
    gpu: Optional[str] = None
    sim = simulation.simulated_device()
    if sim is not None:
        gpu = sim.name
        device = f"{sim.name} (simulated: {simulation.SIMULATE_ENV}={sim.key}; tensors on the CPU, kernels in the interpreter)"
        major, minor = sim.capability
        cap = f"{major}.{minor} (sm_{major}{minor})"
        bf16 = sim.capability >= (8, 0)
        default = torch.bfloat16 if bf16 else torch.float16
        notes.append(f"simulated {sim.name} for tests: decisions as on that GPU, numbers of any benchmark made up")
        if not bf16:
            notes.append("no bf16 instructions on this GPU: the package runs no bf16 kernel below sm_80, chapters use float16")
    elif torch.cuda.is_available() and not hardware.interpreting():
        dev = torch.device("cuda")
        major, minor = torch.cuda.get_device_capability(dev)
        bf16 = (major, minor) >= (8, 0)
        device = gpu = torch.cuda.get_device_name(dev)
        cap = f"{major}.{minor} (sm_{major}{minor})"
        default = torch.bfloat16 if bf16 else torch.float16
        if not bf16:
            notes.append("no bf16 instructions on this GPU: the package runs no bf16 kernel below sm_80, chapters use float16")
        if (major, minor) < (8, 0):
            notes.append("pre-Ampere GPU: Triton supports it unofficially; tl.dot runs without tensor cores")
    else:
        device = f"cpu ({platform.processor() or platform.machine()})"
        # The interpreter handles bf16 as long as kernels upcast after tl.load (they all do);
        # float32 stays the default on CPU because it is what a reader can check by hand.
        cap, bf16, default = None, True, torch.float32
    route = runtime.choose_route("environment", torch.device("cuda" if cap and sim is None else "cpu"))
    path = route.path
    if path == "torch":
        notes.append(f"kernels fall back to PyTorch here: {route.detail}")
    if path == "interpreter":
        notes.append("Triton kernels run in the CPU interpreter: correct but slow; keep sizes small")
    if _triton.TRITON_ALREADY_IMPORTED and path == "interpreter":
        notes.append("triton was imported before tritonforge: restart and import tritonforge first")
    return Environment(
        path=path,
        device=device,
        compute_capability=cap,
        bf16=bf16,
        default_dtype=default,
        torch_version=torch.__version__,
        triton_version=triton_version,
        python_version=platform.python_version(),
        strict=runtime.is_strict(),
        notes=tuple(notes),
        gpu=gpu,
        simulated=sim is not None,
    )


# ----------------------------------------------------------------------------------------------
