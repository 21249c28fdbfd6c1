"""Inside the compiled kernel: what chapter 2's kernels compile to, live, recorded or offline.

:func:`compile_variants` launches each kernel of ``tritonforge.ops.teaching`` on a few inputs
that specialize it differently (a length that is or is not a multiple of 16, a unit or non-unit
stride), and :func:`describe_compiled` reads the compiled kernel's IR at every stage — Triton IR,
TritonGPU IR, LLVM IR, PTX — plus its register, spill and shared-memory counts. That needs a GPU;
``scripts/record_compile.py`` (:func:`record_main`) writes the readings to
``benchmarks/results/compile-*.json`` so that a reader without one sees them too, and without a
recording the compiler can still run here for a chosen architecture, launching nothing
(:func:`compile_records_for_chapter`).

A book helper: it may import the benchmark harness (for the results folder and the git state);
no op imports it.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import io
import json
import pathlib
import platform
import re
import tokenize
from collections.abc import Callable, Sequence
from typing import Optional

import torch

from tritonforge import bench, hardware, runtime, simulation
from tritonforge._triton import triton
from tritonforge.ops.teaching import (
    ADD_2D_BLOCK_M,
    ADD_2D_BLOCK_N,
    NUM_WARPS,
    VECTOR_BLOCK,
    _add_2d_kernel,
    _vector_add_kernel,
    add_2d_grid,
)

STAGES = ("ttir", "ttgir", "llir", "ptx")
STAGE_NAMES = {"ttir": "Triton IR", "ttgir": "TritonGPU IR", "llir": "LLVM IR", "ptx": "PTX"}
MAX_IR_CHARS = 60_000  # per stage in a recording; these kernels need a tenth of it
RECORD_COMMAND = "python scripts/record_compile.py"
# Characters of monospace output that fit the book's content column: 77 do (688 px, 14 px
# DejaVu Sans Mono, 16 px padding each side; tests/browser measures it), one spare for wider fonts.
PAGE_WIDTH = 76


@dataclasses.dataclass(frozen=True)
class Launch:
    """A kernel launch spelled out: ``kernel[grid](*args, **constexprs, num_warps=num_warps)``."""

    kernel: object
    grid: tuple
    args: tuple
    constexprs: dict
    num_warps: int

    def __call__(self):
        """Launch; Triton returns the ``CompiledKernel`` it compiled (or found in its cache)."""
        return self.kernel[self.grid](*self.args, **self.constexprs, num_warps=self.num_warps)


@dataclasses.dataclass(frozen=True)
class CompileVariant:
    """One specialization of a chapter kernel to compile and read."""

    kernel: str  # "vector_add" | "add_2d"
    name: str  # short key, unique per kernel
    description: str  # a sentence for the reader
    make: Callable[[str], Launch]  # device -> the launch (inputs allocated on that device)


def _vector_add_launch(n: int, dtype: torch.dtype) -> Callable[[str], Launch]:
    def make(device: str) -> Launch:
        x = torch.randn(n, device=device).to(dtype)
        y = torch.randn(n, device=device).to(dtype)
        out = torch.empty_like(x)
        grid = (triton.cdiv(n, VECTOR_BLOCK),)
        return Launch(_vector_add_kernel, grid, (x, y, out, n), {"BLOCK": VECTOR_BLOCK}, NUM_WARPS)

    return make


def _add_2d_launch(layout: str, M: int = 1024, N: int = 1024) -> Callable[[str], Launch]:
    def make(device: str) -> Launch:
        if layout == "contiguous":
            x = torch.randn(M, N, device=device)
        elif layout == "transposed":
            x = torch.randn(N, M, device=device).t()  # strides (1, M)
        elif layout == "every-other-column":
            x = torch.randn(M, 2 * N, device=device)[:, ::2]  # strides (2N, 2)
        else:
            raise ValueError(f"unknown layout {layout!r}")
        y = torch.randn(M, N, device=device)
        out = torch.empty(M, N, device=device)
        args = (x, y, out, M, N, x.stride(0), x.stride(1), y.stride(0), y.stride(1), out.stride(0), out.stride(1))
        constexprs = {"BLOCK_M": ADD_2D_BLOCK_M, "BLOCK_N": ADD_2D_BLOCK_N}
        return Launch(_add_2d_kernel, add_2d_grid(M, N), args, constexprs, NUM_WARPS)

    return make


def compile_variants() -> list[CompileVariant]:
    """The chapter's kernels, each launched so that the compiler specializes it differently.

    Triton specializes every launch on its arguments: an integer equal to 1 becomes a constant,
    integers and pointers divisible by 16 are marked so. Those facts decide how wide the loads
    can be, so the same source compiles to different machine code.
    """
    return [
        CompileVariant("vector_add", "fp32, n % 16 == 0", "float32, n = 2**20: every block is whole and 16-byte aligned",
                       _vector_add_launch(2**20, torch.float32)),
        CompileVariant("vector_add", "fp32, n % 16 != 0", "float32, n = 2**20 + 1: the compiler cannot prove 4 neighbours share a mask bit",
                       _vector_add_launch(2**20 + 1, torch.float32)),
        CompileVariant("vector_add", "fp16, n % 16 == 0", "float16, n = 2**20: same 16 bytes per load, now 8 elements",
                       _vector_add_launch(2**20, torch.float16)),
        CompileVariant("add_2d", "contiguous", "x, y, out row-major [1024, 1024]: stride_n = 1 for all three",
                       _add_2d_launch("contiguous")),
        CompileVariant("add_2d", "x transposed", "x = base.t(): stride_m = 1, stride_n = 1024; y and out row-major",
                       _add_2d_launch("transposed")),
        CompileVariant("add_2d", "x every other column", "x = base[:, ::2]: stride_n = 2",
                       _add_2d_launch("every-other-column")),
    ]  # fmt: skip


_LOC_SUFFIX = re.compile(r"\s+loc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")
_MEMORY_OP = re.compile(r"\b(?:ld|st)\.global(?:\.[a-z0-9]+)*")


def clean_ir(stage: str, text: str) -> str:
    """Drop debug-location noise so that the IR reads like code (MLIR ``loc(...)``, PTX ``.loc``,
    LLVM ``!dbg`` and metadata lines, DWARF sections)."""
    lines = []
    for line in text.splitlines():
        if stage in ("ttir", "ttgir"):
            if line.startswith("#loc"):
                continue
            line = _LOC_SUFFIX.sub("", line)
        elif stage == "llir":
            if line.startswith("!") or line.startswith("declare void @llvm.dbg"):
                continue
            line = re.sub(r", !dbg !\d+", "", line)
            line = re.sub(r" !dbg !\d+", "", line)
        elif stage == "ptx":
            stripped = line.strip()
            if stripped.startswith(".loc") or stripped.startswith(".file") or stripped.startswith("$L__"):
                continue
            if stripped.startswith(".section") and "debug" in stripped:
                break  # the DWARF sections run to the end of the file
        lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


def memory_ops(ptx: str) -> dict[str, int]:
    """Count global loads and stores by opcode, e.g. ``{"ld.global.v4.b32": 4, ...}``."""
    return dict(sorted(collections.Counter(_MEMORY_OP.findall(ptx)).items()))


def vector_width_bytes(opcode: str) -> int:
    """Bytes one thread moves with one instruction: ``ld.global.v4.b32`` -> 16, ``ld.global.b16`` -> 2."""
    vec = re.search(r"\.v(\d)\b", opcode)
    bits = re.search(r"\.[bfsu](\d+)\b", opcode)
    return (int(vec.group(1)) if vec else 1) * (int(bits.group(1)) // 8 if bits else 0)


def describe_compiled(compiled) -> dict:
    """What a ``CompiledKernel`` says about itself: IR per stage (cleaned), memory instructions,
    registers and spills per thread (``None`` until the kernel is loaded on a GPU), shared
    memory in bytes, warps and pipeline stages."""
    md = compiled.metadata
    ir = {}
    for stage in STAGES:
        text = compiled.asm.get(stage) if hasattr(compiled.asm, "get") else None
        if isinstance(text, str):
            ir[stage] = clean_ir(stage, text)[:MAX_IR_CHARS]
    return {
        "kernel_name": getattr(md, "name", getattr(compiled, "name", None)),
        "n_regs": getattr(compiled, "n_regs", None),
        "n_spills": getattr(compiled, "n_spills", None),
        "shared_bytes": getattr(md, "shared", None),
        "num_warps": getattr(md, "num_warps", None),
        "num_stages": getattr(md, "num_stages", None),
        "memory_ops": memory_ops(ir.get("ptx", "")),
        "ir": ir,
    }


def compile_metadata(*, device_name: str, compute_capability: Optional[str], offline: bool = False) -> dict:
    """Where and when a recording was made: device, versions, date."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "kind": "compile",
        "device": device_name,
        "compute_capability": compute_capability,
        "offline": offline,
        "torch": torch.__version__,
        "triton": getattr(triton, "__version__", None),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": now.strftime("%Y-%m-%d"),
        "created": now.isoformat(timespec="seconds"),
    }


def record_variant(variant: CompileVariant, device: str = "cuda") -> dict:
    """Launch one variant on a GPU and describe the kernel it compiled."""
    compiled = variant.make(device)()
    if getattr(compiled, "n_regs", None) is None and hasattr(compiled, "_init_handles"):
        compiled._init_handles()  # loads the binary, which is when the driver reports registers
    return {"kernel": variant.kernel, "name": variant.name, "description": variant.description, **describe_compiled(compiled)}


# ----------------------------------------------------------------------------------------------
# Compiler output on the book's page: long lines broken where the language allows it
# ----------------------------------------------------------------------------------------------

IR_WRAPPED = "// long lines broken at spaces to fit the page; the IR is unchanged"
PYTHON_WRAPPED = "# long lines broken inside brackets to fit the page; the code is unchanged"


def _fit(line: str, width: int, breaks: Callable[[str], list[tuple[int, int]]], hang: int) -> list[str]:
    """``line`` as lines of at most ``width`` columns where it can be: cut at a break point (a
    space; ``breaks(line)`` gives ``(rank, position)`` pairs) that fits, the lowest rank first,
    then the rightmost, the rest indented ``hang`` columns past the line's own indent. What no
    break point can shorten is left long."""
    indent = " " * (len(line) - len(line.lstrip()) + hang)
    spots = sorted(breaks(line), key=lambda spot: spot[1])
    out, start, pad = [], 0, ""  # the current line is pad + line[start:]
    while len((pad + line[start:]).expandtabs()) > width:
        fitting = [(rank, pos) for rank, pos in spots
                   if pos > start and line[start:pos].strip() and len((pad + line[start:pos]).rstrip().expandtabs()) <= width]
        if not fitting:
            break
        cut = min(fitting, key=lambda spot: (spot[0], -spot[1]))[1]
        out.append((pad + line[start:cut]).rstrip())
        start, pad = len(line) - len(line[cut:].lstrip()), indent
    return out + [pad + line[start:]]


def _ir_breaks(line: str) -> list[tuple[int, int]]:
    """Spaces where an MLIR line may break (MLIR reads any run of whitespace the same), ranked:
    before the type trailer (`` : type``), after a comma (the shallowest brackets first), after
    a closed group at the top level, then any space. Brackets: (), [], {} and <> (not ``->``)."""
    spots, depth, quoted = [], 0, False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>" and not (ch == ">" and line[i - 1 : i] == "-"):
            depth = max(depth - 1, 0)  # a bracket opened on an earlier line closes at the top level
        elif ch == " " and i > 0 and line[:i].strip():
            if depth == 0 and line.startswith(": ", i + 1):
                spots.append((0, i))
            elif line[i - 1] == ",":
                spots.append((1 + depth, i))
            elif depth == 0 and line[i - 1] in ")]}>":
                spots.append((50, i))
            else:
                spots.append((100 + depth, i))
    return spots


def wrap_ir(text: str, width: int = PAGE_WIDTH) -> str:
    """Compiler IR (MLIR: Triton IR, TritonGPU IR; or PTX) with every line longer than ``width``
    broken at a space and continued 4 columns deeper, so it fits the book's page. MLIR and PTX
    read a line break as any other whitespace, so the IR means the same; when a line was broken
    the text starts with :data:`IR_WRAPPED`, which says so."""
    lines = text.splitlines()
    fitted = [part for line in lines for part in _fit(line, width, _ir_breaks, 4)]
    return "\n".join([IR_WRAPPED] + fitted) if len(fitted) > len(lines) else text


def _python_breaks(line: str) -> list[tuple[int, int]]:
    """Spaces after a comma inside brackets, where Python continues a line by itself; the
    shallowest brackets first. None in a line that does not tokenize on its own."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.lstrip() + "\n").readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    shift, depth, spots = len(line) - len(line.lstrip()), 0, []
    for token in tokens:
        if token.type == tokenize.OP and token.string in ("(", "[", "{"):
            depth += 1
        elif token.type == tokenize.OP and token.string in (")", "]", "}"):
            depth -= 1
        elif token.type == tokenize.OP and token.string == "," and depth > 0:
            end = shift + token.end[1]
            if line[end : end + 1] == " ":
                spots.append((depth, end))
        elif token.type == tokenize.COMMENT:
            return []  # a comment would have to move: leave the line as it is
    return spots


def wrap_python(source: str, width: int = PAGE_WIDTH) -> str:
    """Python source (a generated kernel) with every line longer than ``width`` broken after a
    comma inside brackets and continued 8 columns deeper (PEP 8's hanging indent, clear of the
    body), so it fits the book's page. Python joins lines inside brackets, so the code is the
    same; when a line was broken the text starts with :data:`PYTHON_WRAPPED`, which says so."""
    lines = source.splitlines()
    fitted = [part for line in lines for part in _fit(line, width, _python_breaks, 8)]
    text = "\n".join(fitted) + ("\n" if source.endswith("\n") else "")
    return PYTHON_WRAPPED + "\n" + text if len(fitted) > len(lines) else source


@dataclasses.dataclass
class CompileRecords:
    """Compiled-kernel readings for the chapter: live, recorded, or none (``available`` False)."""

    variants: list[dict]
    metadata: dict
    live: bool = False
    note: str = ""
    source: str = ""  # where the readings were read from (files), if anywhere

    @property
    def available(self) -> bool:
        return bool(self.variants)

    @property
    def provenance(self) -> str:
        if not self.available:
            return self.note
        md = self.metadata
        versions = f"torch {md.get('torch')}, triton {md.get('triton')}"
        cc = f", sm_{md['compute_capability'].replace('.', '')}" if md.get("compute_capability") else ""
        if self.live:
            return f"live: compiled and launched just now on {md.get('device')}{cc} ({versions})"
        if md.get("offline"):
            return (
                f"compiled without a GPU for sm_{md.get('compute_capability', '?').replace('.', '')}, nothing launched "
                f"({versions}, {md.get('date')}); registers read from the binary"
            )
        where = f"\nread from {self.source}" if self.source else ""
        return f"recorded on {md.get('device')}{cc}, {md.get('date')} ({versions}){where}"

    def get(self, kernel: str, name: str) -> Optional[dict]:
        for v in self.variants:
            if v["kernel"] == kernel and v["name"] == name:
                return v
        return None

    def excerpt(
        self,
        kernel: str,
        name: str,
        stage: str,
        pattern: Optional[str] = None,
        *,
        context: int = 0,
        max_lines: int = 40,
        width: Optional[int] = PAGE_WIDTH,
    ) -> str:
        """Lines of one stage's IR: all of it, or those matching ``pattern`` (a regex) with
        ``context`` lines around each; at most ``max_lines``. A sentence instead when there is
        no reading. To fit ``width`` columns, a long ``tt.func`` line gets one argument per line
        and other long lines are broken at spaces (:func:`wrap_ir`, whose first line then says
        so); ``width=None`` keeps the compiler's lines."""
        v = self.get(kernel, name)
        if v is None:
            return f"(no reading of {kernel} [{name}]: {self.note or 'not in this recording'})"
        lines = []
        for line in v["ir"].get(stage, "").splitlines():
            if width and stage in ("ttir", "ttgir") and "tt.func" in line and len(line) > width:
                indent = " " * (len(line) - len(line.lstrip()) + 4)  # one argument per line
                lines.extend(line.replace("(%", "(\n" + indent + "%", 1).replace(", %", ",\n" + indent + "%").splitlines())
            else:
                lines.append(line)
        if pattern is not None:
            keep = set()
            for i, line in enumerate(lines):
                if re.search(pattern, line):
                    keep.update(range(max(0, i - context), min(len(lines), i + context + 1)))
            picked, last = [], None
            for i in sorted(keep):
                if last is not None and i != last + 1:
                    picked.append("    ...")
                picked.append(lines[i])
                last = i
            lines = picked
        if len(lines) > max_lines:
            lines = lines[:max_lines] + [f"    ... ({len(lines) - max_lines} more lines)"]
        if not lines:
            return f"(nothing in the {STAGE_NAMES.get(stage, stage)} matches {pattern!r})"
        return wrap_ir("\n".join(lines), width) if width else "\n".join(lines)

    def summary(self, kernel: Optional[str] = None) -> str:
        """One line per variant: registers, spills, shared memory, global memory instructions."""
        if not self.available:
            return self.note
        rows = [SUMMARY_HEADER] + [r[:-1] + (", ".join(r[-1]),) for r in self._summary_rows(kernel)]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows)

    def summary_table(self, kernel: Optional[str] = None):
        """:meth:`summary` as a :class:`~tritonforge.bench.Table`: an HTML table that fits the book's
        page in a notebook (one memory instruction per line), the same text when printed."""
        from tritonforge.bench.report import Table

        if not self.available:
            return Table([], [], notes=[self.note])
        rows = [r[:-1] + ("\n".join(r[-1]),) for r in self._summary_rows(kernel)]
        return Table(SUMMARY_HEADER, rows, left=2)

    def _summary_rows(self, kernel: Optional[str]) -> list[tuple]:
        rows = []
        for v in self.variants:
            if kernel is not None and v["kernel"] != kernel:
                continue
            ops = [f"{count}× {op}" for op, count in v["memory_ops"].items()] or ["-"]
            rows.append((
                v["kernel"], v["name"],
                "-" if v.get("n_regs") is None else str(v["n_regs"]),
                _spills(v),
                "-" if v.get("shared_bytes") is None else str(v["shared_bytes"]),
                ops,
            ))  # fmt: skip
        return rows


SUMMARY_HEADER = ("kernel", "variant", "regs", "spills", "shared B", "global loads / stores in the PTX")


def _spills(variant: dict) -> str:
    """The driver's spill count; offline, the binary's per-thread stack frame, which is where
    ptxas puts spilled registers in these kernels (``LOCAL`` stays 0 even when they spill)."""
    if variant.get("n_spills") is not None:
        return str(variant["n_spills"])
    if variant.get("stack_bytes") is None:
        return "-"
    return "0" if variant["stack_bytes"] == 0 and not variant.get("local_bytes") else f"{variant['stack_bytes']} B stack"


def record_compilation(device: str = "cuda", kernels: Optional[Sequence[str]] = None) -> CompileRecords:
    """Compile and read every variant on this GPU now (the chapter's live path)."""
    dev = torch.device(device)
    major, minor = torch.cuda.get_device_capability(dev)
    metadata = compile_metadata(device_name=torch.cuda.get_device_name(dev), compute_capability=f"{major}.{minor}")
    variants = [record_variant(v, device) for v in compile_variants() if kernels is None or v.kernel in kernels]
    return CompileRecords(variants=variants, metadata=metadata, live=True)


def write_compile_records(records: CompileRecords, directory=None) -> list[pathlib.Path]:
    """One JSON file per kernel: ``compile-<kernel>-<device>-<date>.json`` (default: the results folder)."""
    directory = pathlib.Path(directory) if directory is not None else bench.results_directory()
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for kernel in dict.fromkeys(v["kernel"] for v in records.variants):
        md = {**records.metadata, "kernel": kernel}
        path = directory / f"compile-{kernel.replace('_', '-')}-{bench.device_slug(md['device'])}-{md['date']}.json"
        body = {"metadata": md, "variants": [v for v in records.variants if v["kernel"] == kernel]}
        path.write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def load_compile_records(directory=None, *, include_offline: bool = False) -> CompileRecords:
    """The newest recording of each kernel in ``directory``; empty (with a note) if there is none.

    Recordings made on a GPU are preferred; offline compilations (no device, no register counts)
    are used only with ``include_offline``.
    """
    directory = pathlib.Path(directory) if directory is not None else bench.results_directory()
    newest: dict[str, tuple[tuple, dict, str]] = {}
    for path in sorted(directory.glob("compile-*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            md = data["metadata"]
            if md.get("kind") != "compile" or not isinstance(data.get("variants"), list):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if md.get("offline") and not include_offline:
            continue
        key = (not md.get("offline"), md.get("created", ""), path.name)
        kernel = md.get("kernel", path.name)
        if kernel not in newest or key > newest[kernel][0]:
            newest[kernel] = (key, data, path.name)
    if not newest:
        return CompileRecords(
            variants=[],
            metadata={},
            note=(
                f"No compiled-kernel recording yet: {directory.name}/ has no compile-*.json. "
                f"On a CUDA machine, `{RECORD_COMMAND}` records one; on a GPU this chapter "
                "compiles the kernels live instead."
            ),
        )
    datas = [d for _, d, _ in newest.values()]
    metadata = dict(datas[0]["metadata"])
    metadata.pop("kernel", None)
    files = ", ".join(f"{directory.parent.name}/{directory.name}/{name}" for _, _, name in newest.values())
    return CompileRecords(
        variants=[v for d in datas for v in d["variants"]],
        metadata=metadata,
        live=False,
        source=files,
    )


# -- Compiling without a GPU ---------------------------------------------------------------------
# Triton's compiler needs no GPU: given a target (say sm_90) it produces every stage down to the
# cubin on any Linux machine. A launch is not possible, so the arguments' specialization is spelled
# out by hand, the way JITFunction.run would derive it.

_POINTER_TYPES = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64", "int32": "*i32"}


def offline_compile(launch: Launch, arch: int):
    """Compile ``launch`` for ``sm_<arch>`` without a device (needs ``TRITON_INTERPRET=0``).

    Specialization as in a real launch: ints equal to 1 become constants; pointers and ints
    divisible by 16 get ``tt.divisibility = 16``.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = launch.kernel
    values = dict(zip(fn.arg_names, launch.args))
    values.update(launch.constexprs)
    signature, constexprs, attrs = {}, {}, {}
    divisible = [["tt.divisibility", 16]]
    for i, name in enumerate(fn.arg_names):
        value = values[name]
        if name in launch.constexprs:
            signature[name], constexprs[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            signature[name] = _POINTER_TYPES[str(value.dtype).replace("torch.", "")]
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = divisible
        elif isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"offline compile: unsupported argument {name}={value!r}")
        elif value == 1:
            signature[name], constexprs[name] = "constexpr", 1
        else:
            signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = divisible
    source = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": launch.num_warps})


def cubin_resources(cubin: bytes) -> dict:
    """Registers, local memory (where spills go) and static shared memory per thread/block, read
    from the binary with the ``cuobjdump`` that ships with Triton; ``{}`` if it cannot."""
    import os
    import subprocess
    import tempfile

    exe = pathlib.Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not exe.exists():
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        try:
            out = subprocess.run([str(exe), "--dump-resource-usage", path], capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return {}
    found = dict(re.findall(r"\b(REG|LOCAL|SHARED|STACK):(\d+)", out))
    return {key.lower(): int(value) for key, value in found.items()}


def offline_records(arch: int) -> CompileRecords:
    """Every variant compiled for ``sm_<arch>`` here, without a GPU (call with the interpreter off)."""
    major, minor = divmod(arch, 10)
    metadata = compile_metadata(device_name=f"no GPU (offline compile for sm_{arch})", compute_capability=f"{major}.{minor}", offline=True)
    variants = []
    for v in compile_variants():
        compiled = offline_compile(v.make("cpu"), arch)
        info = describe_compiled(compiled)
        resources = cubin_resources(compiled.asm.get("cubin", b""))
        info["n_regs"] = resources.get("reg")
        info["local_bytes"] = resources.get("local")
        info["stack_bytes"] = resources.get("stack")  # spilled registers land here: 0 means none
        variants.append({"kernel": v.kernel, "name": v.name, "description": v.description, **info})
    return CompileRecords(variants=variants, metadata=metadata)


def record_main(argv: Sequence[str]) -> int:
    """``scripts/record_compile.py [DIRECTORY] [--offline-arch SM]``: record and write the JSON."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="record_compile.py", description="Record what chapter 2's kernels compile to.")
    parser.add_argument("directory", nargs="?", default=None, help="where to write (default: benchmarks/results/)")
    parser.add_argument("--offline-arch", type=int, default=None, metavar="SM", help="compile for sm_SM (e.g. 90) without a GPU")
    args = parser.parse_args(list(argv))
    if not runtime.triton_available():
        print(f"Triton is not importable: {runtime._triton.TRITON_IMPORT_ERROR}", file=sys.stderr)
        return 2
    if args.offline_arch is None and not torch.cuda.is_available():
        print("no CUDA GPU here: run on a GPU machine, or pass --offline-arch 90 to compile without one", file=sys.stderr)
        return 2
    if hardware.interpreting():
        print("TRITON_INTERPRET=1 is set: unset it (or set it to 0) so that the kernels are compiled", file=sys.stderr)
        return 2
    records = offline_records(args.offline_arch) if args.offline_arch is not None else record_compilation()
    records.metadata["git_commit"] = bench.git_state()[0]
    records.metadata["command"] = " ".join(["python scripts/record_compile.py", *argv])
    print(records.provenance)
    print(records.summary())
    for path in write_compile_records(records, args.directory):
        print("wrote", path)
    return 0


def _compile_offline_in_subprocess(arch: int, timeout: float = 300) -> CompileRecords:
    """Run :func:`record_main` with ``--offline-arch`` in a fresh Python with the interpreter off
    (this process interprets, so its kernels cannot be compiled) and load what it wrote."""
    import os
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        code = f"import sys; from tritonforge.book.compile_ir import record_main; sys.exit(record_main([{tmp!r}, '--offline-arch', '{arch}']))"
        env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION=os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))
        try:
            proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.SubprocessError) as exc:
            return CompileRecords([], {}, note=f"could not compile offline: {type(exc).__name__}: {exc}")
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            return CompileRecords([], {}, note=f"could not compile offline: {last}")
        return load_compile_records(tmp, include_offline=True)


def compile_records_for_chapter(live: bool, directory=None, *, offline_arch: Optional[int] = 90) -> CompileRecords:
    """The chapter's readings, best first:

    1. ``live=True`` (the triton path): compile and launch on this GPU now;
    2. a recording from a GPU in ``directory`` (``scripts/record_compile.py``);
    3. no recording: compile here without a GPU for ``sm_<offline_arch>`` (the H200's sm_90 by
       default) in a subprocess — the IR and registers are real, nothing runs;
    4. none of these (no Triton, say): empty records whose ``note`` says how to get some.

    Under ``TRITONFORGE_SIMULATE_DEVICE`` (tests) ``live=True`` compiles offline for the simulated
    GPU's architecture (``sm_75`` for a T4) instead of 1.: what a reader's GPU would compile,
    without one.
    """
    simulated = simulation.simulated_device()
    if live and simulated is not None:
        major, minor = simulated.capability
        return _compile_offline_in_subprocess(10 * major + minor)
    if live:
        return record_compilation()
    records = load_compile_records(directory)
    if records.available or offline_arch is None or not runtime.triton_available():
        return records
    offline = _compile_offline_in_subprocess(offline_arch)
    if offline.available:
        offline.note = records.note
        return offline
    offline.note = records.note + " " + offline.note
    return offline
