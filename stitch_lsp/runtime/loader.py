"""Compile a CUDA kernel once with NVRTC, cache it, and launch it on PyTorch tensors.

Self-contained: the Python standard library and torch only (Triton too, for the Triton kernels
of the GEMM family, imported only when one is loaded). Stitch copies this
file verbatim into a workspace when a fused kernel is accepted, so the user's own
program can run the kernel without Stitch installed.

    from loader import load_kernel
    kernel = load_kernel(source, "fused_gelu", filename="fused_gelu.cu")
    kernel(grid=(blocks,), block=(256,), args=[x, y, n])

Compilation is by content hash: in this process (a dict) and on disk (the CUBIN
under ``$STITCH_KERNEL_CACHE``, else ``~/.cache/stitch/kernels``), so a second
process pays only for loading the module. Arguments are converted by the
kernel's own parameter list, read from the source: a ``float`` parameter gets a
32-bit float, an ``int64_t`` a 64-bit int, and a tensor passed where ``float*``
is expected must be float32 on the GPU. A mismatch is a ``TypeError`` before the
launch instead of garbage after it.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import math
import operator
import os
import re
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

LOADER_VERSION = "1"

__all__ = ["Kernel", "KernelCompileError", "CompileDiagnostic", "load_kernel", "load_triton", "prefetch_kernels",
           "compile_records", "cache_dir"]


@dataclass
class CompileDiagnostic:
    file: str
    line: int  # 1-based, in ``file``
    severity: str  # "error" | "warning" | "note"
    message: str


class KernelCompileError(RuntimeError):
    """NVRTC rejected the source. ``log`` has lines mapped to the caller's file."""

    def __init__(self, name: str, filename: str, log: str, diagnostics: list[CompileDiagnostic]) -> None:
        first = next((d for d in diagnostics if d.severity == "error"), None)
        head = f"{first.file}:{first.line}: {first.message}" if first else log.strip().splitlines()[-1:] or ""
        super().__init__(f"kernel {name!r} failed to compile: {head}\n{log}")
        self.name = name
        self.filename = filename
        self.log = log
        self.diagnostics = diagnostics
        self.source = ""
        self.first_line = 1


@dataclass
class CompileRecord:
    """What one ``load_kernel`` call did; the Verifier reads these."""

    name: str
    filename: str
    mangled: str
    backend: str
    seconds: float
    cached: str  # "" (compiled now) | "memory" | "disk"
    registers: int = 0
    shared_bytes: int = 0
    const_bytes: int = 0
    local_bytes: int = 0
    max_threads_per_block: int = 0
    log: str = ""
    source_sha: str = ""
    options: list[str] = field(default_factory=list)


_RECORDS: list[CompileRecord] = []
_KERNELS: dict[str, "Kernel"] = {}
_LOCK = threading.RLock()
# Called as observer(kernel_name, stream_handle) before every launch (the Verifier's stream check).
_LAUNCH_OBSERVERS: list[Callable[[str, int], None]] = []


def add_launch_observer(observer: Callable[[str, int], None]) -> Callable[[], None]:
    """Call ``observer(kernel_name, stream_handle)`` before every launch of a loaded kernel until the
    returned function is called (the Verifier's stream checks)."""
    _LAUNCH_OBSERVERS.append(observer)

    def remove() -> None:
        if observer in _LAUNCH_OBSERVERS:
            _LAUNCH_OBSERVERS.remove(observer)

    return remove


def compile_records() -> list[CompileRecord]:
    return list(_RECORDS)


def cache_dir() -> Path:
    env = os.environ.get("STITCH_KERNEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "stitch" / "kernels"


# --------------------------------------------------------------------------- libraries


def _load_first(names: Sequence[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


_LIBS: dict[str, ctypes.CDLL] = {}


def _nvrtc() -> ctypes.CDLL:
    if "nvrtc" in _LIBS:
        return _LIBS["nvrtc"]
    major = (torch.version.cuda or "12").split(".")[0]
    names = [f"libnvrtc.so.{major}", "libnvrtc.so"]
    # pip-installed CUDA (the nvidia-* wheels torch depends on), then a toolkit.
    for base in sys.path:
        names += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libnvrtc.so*")))
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            names += sorted(glob.glob(os.path.join(home, "lib64", "libnvrtc.so*")))
    lib = _load_first(names)
    if lib is None:
        raise RuntimeError("NVRTC (libnvrtc.so) was not found; install the CUDA runtime compiler")
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    _LIBS["nvrtc"] = lib
    return lib


def _cuda() -> ctypes.CDLL:
    if "cuda" not in _LIBS:
        lib = _load_first(["libcuda.so.1", "libcuda.so"])
        if lib is None:
            raise RuntimeError("the CUDA driver (libcuda.so.1) was not found")
        _LIBS["cuda"] = lib
    return _LIBS["cuda"]


def _check_cu(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _cuda().cuGetErrorString(result, ctypes.byref(text))
        message = text.value.decode() if text.value else f"error {result}"
        raise RuntimeError(f"{what} failed: {message}")


def _check_nvrtc(result: int, what: str) -> None:
    if result != 0:
        raise RuntimeError(f"{what} failed: {_nvrtc().nvrtcGetErrorString(result).decode()}")


def nvrtc_version() -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check_nvrtc(_nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return f"{major.value}.{minor.value}"


def _include_dirs() -> list[str]:
    dirs: list[str] = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and os.path.isfile(os.path.join(home, "include", "cuda_fp16.h")):
            dirs.append(os.path.join(home, "include"))
    for base in sys.path:
        dirs += sorted(os.path.dirname(p) for p in glob.glob(os.path.join(base, "nvidia", "*", "include", "cuda_fp16.h")))
    seen: list[str] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen[:2]


# --------------------------------------------------------------------------- compile


_DIAG = re.compile(r"^(?P<file>[^\n(]+)\((?P<line>\d+)\): (?P<sev>error|warning|remark|note)\s*(?:#\w+-\w+)?:?\s*(?P<msg>.*)$")


def parse_nvrtc_log(log: str, filename: str, first_line: int = 1) -> tuple[str, list[CompileDiagnostic]]:
    """Shift line numbers by ``first_line - 1`` (source embedded in a bigger file) and parse them."""
    out_lines = []
    diags: list[CompileDiagnostic] = []
    for raw in log.splitlines():
        m = _DIAG.match(raw.strip())
        if m and m.group("file").strip() == filename:
            line = int(m.group("line")) + first_line - 1
            raw = f"{filename}({line}): {m.group('sev')}: {m.group('msg')}"
            sev = "note" if m.group("sev") == "remark" else m.group("sev")
            diags.append(CompileDiagnostic(filename, line, sev, m.group("msg").strip()))
        out_lines.append(raw)
    return "\n".join(out_lines), diags


def _arch(device: int) -> str:
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def _compile(source: str, name: str, filename: str, options: list[str]) -> tuple[bytes, str, str]:
    lib = _nvrtc()
    prog = ctypes.c_void_p()
    _check_nvrtc(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), filename.encode(), 0, None, None),
                 "nvrtcCreateProgram")
    try:
        c_name = name.encode()
        _check_nvrtc(lib.nvrtcAddNameExpression(prog, c_name), "nvrtcAddNameExpression")
        opts = [o.encode() for o in options]
        array = (ctypes.c_char_p * len(opts))(*opts)
        result = lib.nvrtcCompileProgram(prog, len(opts), array)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if result != 0:
            return b"", "", log if log.strip() else lib.nvrtcGetErrorString(result).decode()
        _check_nvrtc(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        _check_nvrtc(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        lowered = ctypes.c_char_p()
        _check_nvrtc(lib.nvrtcGetLoweredName(prog, c_name, ctypes.byref(lowered)), "nvrtcGetLoweredName")
        mangled = lowered.value.decode() if lowered.value else name
        return cubin.raw, mangled, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _ensure_context(device: int) -> None:
    torch.cuda.init()
    torch.cuda.set_device(device)
    torch.cuda.current_stream(device)  # creates the primary context through the runtime
    lib = _cuda()
    ctx = ctypes.c_void_p()
    _check_cu(lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
    if not ctx.value:
        dev = ctypes.c_int()
        _check_cu(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
        _check_cu(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        _check_cu(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def _options(arch: str, options: Sequence[str]) -> list[str]:
    opts = [f"--gpu-architecture={arch}", "--std=c++17", *options]
    if os.environ.get("STITCH_KERNEL_LINEINFO") == "1" and "-lineinfo" not in opts:
        opts.append("-lineinfo")
    return opts + [f"-I{d}" for d in _include_dirs()]


def compile_cubin(source: str, name: str, *, arch: str, options: Sequence[str] = (), filename: str | None = None,
                  first_line: int = 1) -> tuple[bytes, str, str]:
    """NVRTC only, no GPU needed: (cubin, lowered name, log). Raises KernelCompileError."""
    filename = filename or f"{name}.cu"
    # A #line directive makes NVRTC's messages and -lineinfo cite the caller's file and lines.
    directed = f'#line {first_line} "{filename}"\n{source}'
    cubin, mangled, log = _compile(directed, name, filename, _options(arch, options))
    if not cubin:
        mapped, diags = parse_nvrtc_log(log, filename)
        error = KernelCompileError(name, filename, mapped, diags)
        error.source, error.first_line = source, first_line
        raise error
    return cubin, mangled, parse_nvrtc_log(log, filename)[0]


def load_kernel(source: str, name: str, *, options: Sequence[str] = (), filename: str | None = None,
                first_line: int = 1, device: int | None = None) -> "Kernel":
    """Compile ``name`` from ``source`` (or fetch it from the cache) and return a launchable Kernel.

    ``filename`` is what compile errors cite (default ``<name>.cu``); ``first_line``
    is the line of ``filename`` where ``source`` starts, when the source is embedded
    in a larger file. ``options`` go to NVRTC as given (``-DBLOCK=256``,
    ``--use_fast_math``, ...). Set ``STITCH_KERNEL_LINEINFO=1`` to add ``-lineinfo``.
    """
    if not torch.cuda.is_available():
        raise RuntimeError(f"cannot load kernel {name!r}: CUDA is not available")
    filename = filename or f"{name}.cu"
    device = torch.cuda.current_device() if device is None else device
    start = time.perf_counter()
    arch = _arch(device)
    key = _cache_key(source, name, filename, first_line, arch, options)
    source_sha = hashlib.sha256(source.encode()).hexdigest()[:16]
    with _LOCK:
        memo_key = f"{key}:{device}"
        if memo_key in _KERNELS:
            kernel = _KERNELS[memo_key]
            _RECORDS.append(kernel._record(time.perf_counter() - start, "memory"))
            return kernel
        prefetched = _PREFETCHED.pop(key, None)
        if prefetched:
            cubin, mangled, log, share = prefetched
            cached, start = "", start - share
        else:
            cubin, mangled, log, cached = _from_disk(key)
        if not cubin:
            cubin, mangled, log = compile_cubin(source, name, arch=arch, options=options, filename=filename,
                                                first_line=first_line)
            _to_disk(key, cubin, mangled, log)
        _ensure_context(device)
        kernel = Kernel(name, mangled, cubin, filename=filename, source=source, log=log, device=device)
        kernel._source_sha = source_sha
        kernel._options = list(options)
        _KERNELS[memo_key] = kernel
        _RECORDS.append(kernel._record(time.perf_counter() - start, cached))
        return kernel


def _cache_key(source: str, name: str, filename: str, first_line: int, arch: str, options: Sequence[str]) -> str:
    key_src = json.dumps([LOADER_VERSION, source, name, filename, first_line, _options(arch, options),
                          torch.version.cuda])
    return hashlib.sha256(key_src.encode()).hexdigest()[:32]


# Compiled by ``prefetch_kernels`` and not loaded yet: key -> (cubin, lowered name, log, its share of the wall
# time the batch took, which its load's record counts as compile time).
_PREFETCHED: dict[str, tuple[bytes, str, str, float]] = {}


def prefetch_kernels(kernels: Sequence[tuple[str, str]], *, options: Sequence[str] = (), device: int | None = None,
                     workers: int | None = None) -> int:
    """Compile the ``(source, name)`` kernels that are in neither cache, on several threads at once, so the
    ``load_kernel`` calls that follow (in launch order) only load them. Returns how many were compiled.

    A program of a hundred kernels otherwise compiles them one after another at its first call; NVRTC
    compiles separate programs concurrently and ctypes lets go of the GIL while it does. A kernel that
    fails to compile is left for its ``load_kernel`` to report, at the step that launches it.
    """
    if not torch.cuda.is_available():
        return 0
    device = torch.cuda.current_device() if device is None else device
    arch = _arch(device)
    todo: dict[str, tuple[str, str]] = {}
    for source, name in kernels:
        key = _cache_key(source, name, f"{name}.cu", 1, arch, options)
        if key in todo or key in _PREFETCHED or f"{key}:{device}" in _KERNELS:
            continue
        if (cache_dir() / key).with_suffix(".cubin").exists():
            continue
        todo[key] = (source, name)
    if len(todo) < 2:
        return 0  # one kernel compiles as fast on the caller's thread

    def build(item: tuple[str, tuple[str, str]]) -> None:
        key, (source, name) = item
        try:
            cubin, mangled, log = compile_cubin(source, name, arch=arch, options=options)
        except Exception:  # noqa: BLE001 - load_kernel compiles it again and raises where it is launched
            return
        _to_disk(key, cubin, mangled, log)
        done[key] = (cubin, mangled, log)

    from concurrent.futures import ThreadPoolExecutor

    done: dict[str, tuple[bytes, str, str]] = {}
    began = time.perf_counter()
    workers = workers or min(len(todo), os.cpu_count() or 1, 16)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stitch-nvrtc") as pool:
        list(pool.map(build, todo.items()))
    share = (time.perf_counter() - began) / len(todo)
    with _LOCK:
        for key, compiled in done.items():
            _PREFETCHED[key] = (*compiled, share)
    return len(todo)


def _from_disk(key: str) -> tuple[bytes, str, str, str]:
    base = cache_dir() / key
    try:
        meta = json.loads((base.with_suffix(".json")).read_text())
        cubin = base.with_suffix(".cubin").read_bytes()
    except (OSError, ValueError):
        return b"", "", "", ""
    if hashlib.sha256(cubin).hexdigest() != meta.get("sha256"):
        return b"", "", "", ""
    return cubin, meta.get("mangled", ""), meta.get("log", ""), "disk"


def _to_disk(key: str, cubin: bytes, mangled: str, log: str) -> None:
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f".{key}.{os.getpid()}.tmp"
        tmp.write_bytes(cubin)
        os.replace(tmp, directory / f"{key}.cubin")
        meta = {"mangled": mangled, "log": log, "sha256": hashlib.sha256(cubin).hexdigest()}
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, directory / f"{key}.json")
    except OSError:
        pass  # a read-only home only costs the next process a compile


# --------------------------------------------------------------------------- Triton


_TRITON: dict[str, Any] = {}


def load_triton(source: str, name: str) -> Any:
    """The ``@triton.jit`` kernel ``name`` from ``source`` (a Python module's text).

    Triton reads a kernel's source from its file, so the text is written once, by content hash,
    under the cache folder (``triton/<hash>.py``) and imported from there; Triton compiles it on
    the first launch and keeps the binary in its own cache (``~/.triton``). Needs ``triton``
    (installed with PyTorch on Linux); the error says so when it is missing.
    """
    key = hashlib.sha256(f"{LOADER_VERSION}\0{name}\0{source}".encode()).hexdigest()[:32]
    with _LOCK:
        if key in _TRITON:
            return _TRITON[key]
        start = time.perf_counter()
        try:
            import triton  # noqa: F401 - a clear message here beats one from inside the kernel module
        except ImportError as exc:
            raise RuntimeError(f"kernel {name!r} is a Triton kernel and Triton is not installed "
                               "(pip install triton)") from exc
        import importlib.util

        directory = cache_dir() / "triton"
        path = directory / f"{key}.py"
        try:
            if not path.is_file() or path.read_text(encoding="utf-8") != source:
                directory.mkdir(parents=True, exist_ok=True)
                tmp = directory / f".{key}.{os.getpid()}.tmp"
                tmp.write_text(source, encoding="utf-8")
                os.replace(tmp, path)
        except OSError as exc:
            raise RuntimeError(f"kernel {name!r}: cannot write its Triton module under {directory}: {exc}") from exc
        spec = importlib.util.spec_from_file_location(f"stitch_triton_{key}", path)
        if spec is None or spec.loader is None:
            raise RuntimeError(f"kernel {name!r}: cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        kernel = TritonKernel(getattr(module, name), name)
        _TRITON[key] = kernel
        _RECORDS.append(CompileRecord(name=name, filename=str(path), mangled=name, backend="triton",
                                      seconds=time.perf_counter() - start, cached="",
                                      source_sha=hashlib.sha256(source.encode()).hexdigest()[:16]))
        return kernel


class TritonKernel:
    """A Triton kernel: ``launch(grid, args, meta)``; ``kernel[grid](...)`` is Triton's own launch.

    The first launch of each (device, grid, meta) goes through Triton's JIT (compile or fetch the
    binary, specialise on the arguments); later ones call the compiled kernel's launcher directly,
    skipping the JIT's argument binding and cache lookup (tens of microseconds of host time a call,
    which a GPU waiting on the launch would spend idle). The arguments' dtypes, alignment and
    count are fixed by the caller's signature (a fused module's program is per input signature).
    Triton's launch hooks (profilers) keep the JIT path.
    """

    def __init__(self, fn: Any, name: str) -> None:
        self.fn = fn
        self.name = name
        self._fast: dict[Any, Any] = {}

    def __getitem__(self, grid: Any) -> Any:
        return self.fn[grid]

    def warmup(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.warmup(*args, **kwargs)

    def launch(self, grid: tuple[int, int, int], args: Sequence[Any], meta: dict[str, int]) -> None:
        device = args[0].get_device() if args and hasattr(args[0], "get_device") else 0
        key = (device, grid, tuple(meta.items()))
        fast = self._fast.get(key)
        if fast is not None:
            from triton import knobs

            if knobs.runtime.launch_enter_hook is None and knobs.runtime.launch_exit_hook is None:
                run, function, packed, consts = fast
                if _LAUNCH_OBSERVERS:
                    for observer in list(_LAUNCH_OBSERVERS):
                        observer(self.name, _current_stream_handle(device))
                run(grid[0], grid[1], grid[2], _current_stream_handle(device), function, packed, None, None, None,
                    *args, *consts)
                return
        if _LAUNCH_OBSERVERS:
            for observer in list(_LAUNCH_OBSERVERS):
                observer(self.name, _current_stream_handle(device))
        compiled = self.fn[grid](*args, **meta)
        if key not in self._fast:
            self._fast[key] = self._fast_path(compiled, len(args), meta)

    def _fast_path(self, compiled: Any, nargs: int, meta: dict[str, int]) -> Any:
        """(launcher, function, metadata, constexpr values) of a compiled kernel, or None (keep the JIT)."""
        names = list(getattr(self.fn, "arg_names", []) or [])
        try:
            consts = [meta[n] for n in names[nargs:]]
            run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
        except (AttributeError, KeyError, TypeError):
            return None  # another Triton (or its interpreter): every launch through the JIT
        if len(names) != nargs + len(consts) or function is None:
            return None
        return run, function, packed, consts


# --------------------------------------------------------------------------- arguments


@dataclass
class _Param:
    text: str
    kind: str  # "pointer" | scalar ctype name | "opaque"
    base: str = ""  # pointee / scalar type without qualifiers


_SCALARS: dict[str, Any] = {
    "float": ctypes.c_float, "double": ctypes.c_double,
    "int": ctypes.c_int32, "int32_t": ctypes.c_int32, "signed": ctypes.c_int32, "signed int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32, "unsigned int": ctypes.c_uint32, "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64, "long int": ctypes.c_int64, "long long": ctypes.c_int64, "long long int": ctypes.c_int64,
    "int64_t": ctypes.c_int64, "ptrdiff_t": ctypes.c_int64,
    "unsigned long": ctypes.c_uint64, "unsigned long long": ctypes.c_uint64, "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_uint64,
    "short": ctypes.c_int16, "int16_t": ctypes.c_int16, "unsigned short": ctypes.c_uint16, "uint16_t": ctypes.c_uint16,
    "char": ctypes.c_int8, "int8_t": ctypes.c_int8, "signed char": ctypes.c_int8,
    "unsigned char": ctypes.c_uint8, "uint8_t": ctypes.c_uint8, "bool": ctypes.c_bool,
    "half": "half", "__half": "half", "__nv_bfloat16": "bfloat16", "nv_bfloat16": "bfloat16",
}

_POINTEE_DTYPES: dict[str, tuple[torch.dtype, ...]] = {
    "float": (torch.float32,), "double": (torch.float64,),
    "half": (torch.float16,), "__half": (torch.float16,),
    "__nv_bfloat16": (torch.bfloat16,), "nv_bfloat16": (torch.bfloat16,),
    "int": (torch.int32,), "int32_t": (torch.int32,), "unsigned": (torch.int32, torch.uint32),
    "unsigned int": (torch.int32, torch.uint32), "uint32_t": (torch.int32, torch.uint32),
    "long": (torch.int64,), "long long": (torch.int64,), "int64_t": (torch.int64,),
    "unsigned long long": (torch.int64, torch.uint64), "uint64_t": (torch.int64, torch.uint64),
    "short": (torch.int16,), "int16_t": (torch.int16,),
    "bool": (torch.bool,), "unsigned char": (torch.uint8, torch.bool), "uint8_t": (torch.uint8, torch.bool),
    "int8_t": (torch.int8,), "signed char": (torch.int8,),
    "float2": (torch.float32, torch.complex64), "float4": (torch.float32,),
    "double2": (torch.float64, torch.complex128), "half2": (torch.float16,), "__half2": (torch.float16,),
    "__nv_bfloat162": (torch.bfloat16,), "int4": (torch.int32,), "int2": (torch.int32,), "uint4": (torch.int32,),
}

_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct|__grid_constant__)\b")


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", lambda m: " " * len(m.group()), source, flags=re.S)
    return re.sub(r"//[^\n]*", "", source)


def kernel_params(source: str, name: str) -> list[_Param] | None:
    """The parameter list of ``__global__ ... name(...)`` in ``source``, or None if not found."""
    base = name.split("<")[0].split("::")[-1]
    text = _strip_comments(source)
    pattern = re.compile(r"__global__[^;{]*?\b" + re.escape(base) + r"\s*\(", re.S)
    m = pattern.search(text)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(text) and depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    inner = text[m.end() : i - 1]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    params = []
    for part in parts:
        decl = part.split("=")[0].strip()
        if not decl or decl == "void":
            continue
        if "*" in decl or "[" in decl:
            pointee = _QUALIFIERS.sub(" ", decl.split("*")[0].split("[")[0])
            params.append(_Param(decl, "pointer", " ".join(pointee.split())))
            continue
        words = _QUALIFIERS.sub(" ", decl).split()
        type_words = words[:-1] if len(words) > 1 else words
        base_type = " ".join(type_words)
        if base_type in _SCALARS:
            params.append(_Param(decl, "scalar", base_type))
        else:
            params.append(_Param(decl, "opaque", base_type))
    return params


def _scalar(param: _Param, value: Any, index: int, name: str) -> Any:
    ctype = _SCALARS[param.base]
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"{name}: argument {index} ({param.text}) is a scalar but got a tensor of {value.numel()}")
        value = value.item()
    if isinstance(value, ctypes._SimpleCData):
        return value
    if ctype == "half":
        return ctypes.c_uint16(struct.unpack("<H", struct.pack("<e", float(value)))[0])
    if ctype == "bfloat16":
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        return ctypes.c_uint16(bits >> 16)
    if ctype in (ctypes.c_float, ctypes.c_double):
        return ctype(float(value))
    if isinstance(value, float) and not float(value).is_integer():
        raise TypeError(f"{name}: argument {index} ({param.text}) is an integer but got {value!r}")
    return ctype(int(value))


def _pointer(param: _Param, value: Any, index: int, name: str, device: int) -> ctypes.c_void_p:
    if value is None:
        return ctypes.c_void_p(0)
    if isinstance(value, int):
        return ctypes.c_void_p(value)
    if isinstance(value, ctypes.c_void_p):
        return value
    if isinstance(value, torch.Tensor):
        if not value.is_cuda:
            raise TypeError(f"{name}: argument {index} ({param.text}) needs a CUDA tensor, got one on {value.device}")
        if value.get_device() != device:
            raise TypeError(f"{name}: argument {index} ({param.text}) is on {value.device}, kernel on cuda:{device}")
        allowed = _POINTEE_DTYPES.get(param.base)
        if allowed is not None and value.dtype not in allowed:
            raise TypeError(f"{name}: argument {index} ({param.text}) points to {param.base} but the tensor is "
                            f"{str(value.dtype).replace('torch.', '')}")
        return ctypes.c_void_p(value.data_ptr())
    if hasattr(value, "data_ptr"):
        return ctypes.c_void_p(int(value.data_ptr()))
    raise TypeError(f"{name}: argument {index} ({param.text}) is a pointer; got {type(value).__name__}")


def _guess(value: Any, index: int, name: str, device: int) -> Any:
    if isinstance(value, torch.Tensor):
        return _pointer(_Param("", "pointer", "void"), value, index, name, device)
    if isinstance(value, ctypes._SimpleCData) or isinstance(value, ctypes.Structure):
        return value
    if isinstance(value, bool):
        return ctypes.c_bool(value)
    if isinstance(value, int):
        return ctypes.c_int32(value)
    if isinstance(value, float):
        return ctypes.c_float(value)
    raise TypeError(f"{name}: argument {index}: cannot pass {type(value).__name__}")


def _dim3(value: Any, what: str) -> tuple[int, int, int]:
    # Fast paths first: launches are hot, and (n, 1, 1) / n are what callers pass.
    if type(value) is tuple and len(value) == 3:
        a, b, c = value
        if type(a) is int and type(b) is int and type(c) is int and a > 0 and b > 0 and c > 0:
            return value
    elif type(value) is int and value > 0:
        return value, 1, 1
    try:
        # operator.index: ints and integer-like (numpy, 0-d integer tensors); a float is a mistake.
        dims = [operator.index(value)] if hasattr(value, "__index__") else [operator.index(v) for v in value]
    except TypeError:
        raise TypeError(f"{what} must be integers, got {value!r}") from None
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    dims += [1] * (3 - len(dims))
    return dims[0], dims[1], dims[2]


def _pack(values: list[Any]) -> Any:
    """The ``void**`` cuLaunchKernel takes: the address of each argument's storage.

    ``values`` must stay alive until the launch returns (the driver copies them then).
    """
    if not values:
        return (ctypes.c_void_p * 1)()
    return (ctypes.c_void_p * len(values))(*map(ctypes.addressof, values))


# --------------------------------------------------------------------------- kernel

_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream_handle(device: int) -> int:
    # The raw handle without building a torch.cuda.Stream object: launches are hot.
    if _RAW_STREAM is not None:
        return int(_RAW_STREAM(device))
    return torch.cuda.current_stream(device).cuda_stream


_ATTR = {"max_threads_per_block": 0, "shared_bytes": 1, "const_bytes": 2, "local_bytes": 3, "registers": 4}
_MAX_DYNAMIC_SHARED = 8
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED


_MULTIPROCESSOR_COUNT = 16  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT


class Kernel:
    """A loaded kernel: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""

    def __init__(self, name: str, mangled: str, cubin: bytes, *, filename: str, source: str, log: str,
                 device: int) -> None:
        self.name = name
        self.mangled = mangled
        self.filename = filename
        self.log = log
        self.device = device
        self._source_sha = ""
        self._options: list[str] = []
        lib = _cuda()
        self._module = ctypes.c_void_p()
        _check_cu(lib.cuModuleLoadData(ctypes.byref(self._module), cubin), f"loading {name}")
        self._func = ctypes.c_void_p()
        _check_cu(lib.cuModuleGetFunction(ctypes.byref(self._func), self._module, mangled.encode()),
                  f"finding {name} in its module")
        self.attributes = {key: self._attribute(code) for key, code in _ATTR.items()}
        cluster = re.search(r"__cluster_dims__\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)", source)
        blocks = math.prod(int(d) for d in cluster.groups()) if cluster else 1
        if blocks > 8:
            # Clusters of more than 8 blocks (up to 16 on Hopper) only where the kernel allows them.
            _check_cu(lib.cuFuncSetAttribute(self._func, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                      f"{name}: allowing a cluster of {blocks} blocks")
        self.params = kernel_params(source, name)
        self._dynamic_shared = 0
        self._slots = None  # launch_pointers' argument storage, made on first use
        self._argv = None
        self._lock = threading.Lock()

    def _attribute(self, code: int) -> int:
        value = ctypes.c_int()
        _check_cu(_cuda().cuFuncGetAttribute(ctypes.byref(value), code, self._func), "cuFuncGetAttribute")
        return value.value

    @property
    def registers(self) -> int:
        return self.attributes["registers"]

    def _record(self, seconds: float, cached: str) -> CompileRecord:
        return CompileRecord(
            name=self.name, filename=self.filename, mangled=self.mangled, backend="nvrtc", seconds=seconds,
            cached=cached, registers=self.attributes["registers"], shared_bytes=self.attributes["shared_bytes"],
            const_bytes=self.attributes["const_bytes"], local_bytes=self.attributes["local_bytes"],
            max_threads_per_block=self.attributes["max_threads_per_block"], log=self.log,
            source_sha=self._source_sha, options=list(self._options),
        )

    def _marshal(self, args: Sequence[Any]) -> list[Any]:
        params = self.params
        if params is None or any(p.kind == "opaque" for p in params):
            return [_guess(a, i, self.name, self.device) for i, a in enumerate(args)]
        if len(args) != len(params):
            raise TypeError(f"{self.name} takes {len(params)} arguments ({', '.join(p.text for p in params)}), "
                            f"got {len(args)}")
        return [
            _pointer(p, a, i, self.name, self.device) if p.kind == "pointer" else _scalar(p, a, i, self.name)
            for i, (p, a) in enumerate(zip(params, args))
        ]

    def resident_blocks(self, block: int, shared_mem: int = 0) -> int:
        """Blocks of ``block`` threads (and ``shared_mem`` bytes of dynamic shared memory) the whole device runs
        at once: its occupancy times its SMs."""
        self._allow_shared(shared_mem)
        per_sm = ctypes.c_int()
        _check_cu(_cuda().cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(per_sm), self._func, int(block),
                                                                       ctypes.c_size_t(shared_mem)),
                  f"{self.name}: cuOccupancyMaxActiveBlocksPerMultiprocessor")
        dev, sms = ctypes.c_int(), ctypes.c_int()
        _check_cu(_cuda().cuDeviceGet(ctypes.byref(dev), self.device), "cuDeviceGet")
        _check_cu(_cuda().cuDeviceGetAttribute(ctypes.byref(sms), _MULTIPROCESSOR_COUNT, dev), "cuDeviceGetAttribute")
        return per_sm.value * sms.value

    def __call__(self, grid: Any, block: Any, args: Sequence[Any] = (), shared_mem: int = 0,
                 stream: Any = None, cooperative: bool = False) -> None:
        """``cooperative``: every block resident at once (the driver refuses a grid larger than that), for
        kernels whose blocks wait for one another."""
        gx, gy, gz = _dim3(grid, "grid")
        bx, by, bz = _dim3(block, "block")
        threads = bx * by * bz
        if threads > self.attributes["max_threads_per_block"]:
            raise ValueError(f"{self.name}: block of {threads} threads exceeds this kernel's limit of "
                             f"{self.attributes['max_threads_per_block']}")
        values = self._marshal(args)
        array = _pack(values)
        self._allow_shared(shared_mem)
        if stream is None:
            handle = _current_stream_handle(self.device)
        elif isinstance(stream, int):
            handle = stream
        else:
            handle = stream.cuda_stream
        if _LAUNCH_OBSERVERS:
            for observer in list(_LAUNCH_OBSERVERS):
                observer(self.name, handle)
        if cooperative:
            _check_cu(_cuda().cuLaunchCooperativeKernel(self._func, gx, gy, gz, bx, by, bz, int(shared_mem),
                                                        ctypes.c_void_p(handle), array),
                      f"launching {self.name} (cooperative)")
            return
        _check_cu(
            _cuda().cuLaunchKernel(self._func, gx, gy, gz, bx, by, bz, int(shared_mem), ctypes.c_void_p(handle),
                                   array, None),
            f"launching {self.name}",
        )

    def _allow_shared(self, shared_mem: int) -> None:
        """Dynamic shared memory over 48 KB a block is the kernel's to ask for, once."""
        if shared_mem > 48 * 1024 and shared_mem > self._dynamic_shared:
            _check_cu(_cuda().cuFuncSetAttribute(self._func, _MAX_DYNAMIC_SHARED, int(shared_mem)),
                      f"{self.name}: asking for {shared_mem} bytes of shared memory")
            self._dynamic_shared = shared_mem

    def launch_pointers(self, grid: tuple[int, int, int], block: tuple[int, int, int], pointers: Sequence[int],
                        shared_mem: int = 0, cooperative: bool = False) -> None:
        """A launch whose arguments are all device pointers (as ints), on the current stream.

        The hot path of a fused module: the module makes one checked ``__call__`` per argument
        signature (devices, dtypes, counts) and then launches this way, writing the pointers into
        slots allocated once instead of marshalling every argument on every call.
        """
        slots = self._slots
        if slots is None:
            n = len(self.params or ())
            if self.params is None or any(p.kind != "pointer" for p in self.params):
                raise TypeError(f"{self.name}: launch_pointers needs a kernel whose parameters are all pointers")
            slots = (ctypes.c_void_p * max(n, 1))()
            base, size = ctypes.addressof(slots), ctypes.sizeof(ctypes.c_void_p)
            self._argv = (ctypes.c_void_p * max(n, 1))(*[base + i * size for i in range(max(n, 1))])
            self._slots = slots
        if len(pointers) != len(self.params):
            raise TypeError(f"{self.name} takes {len(self.params)} arguments, got {len(pointers)}")
        handle = _current_stream_handle(self.device)
        if shared_mem > self._dynamic_shared:  # the hot path pays one comparison
            self._allow_shared(shared_mem)
        if _LAUNCH_OBSERVERS:
            for observer in list(_LAUNCH_OBSERVERS):
                observer(self.name, handle)
        # The driver copies the arguments at launch: the lock only keeps two threads' pointers apart.
        with self._lock:
            for i, ptr in enumerate(pointers):
                slots[i] = ptr
            if cooperative:
                _check_cu(_cuda().cuLaunchCooperativeKernel(self._func, grid[0], grid[1], grid[2], block[0],
                                                            block[1], block[2], shared_mem, ctypes.c_void_p(handle),
                                                            self._argv), f"launching {self.name} (cooperative)")
                return
            _check_cu(_cuda().cuLaunchKernel(self._func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                             shared_mem, ctypes.c_void_p(handle), self._argv, None),
                      f"launching {self.name}")

    def __repr__(self) -> str:
        return f"<Kernel {self.name} regs={self.attributes['registers']} file={self.filename}>"
