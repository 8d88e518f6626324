"""What a verification should do (plain data: it travels to the worker)."""

from __future__ import annotations

from attrs import define, field

# torch.compile modes the baseline may use. Those that capture CUDA graphs ("reduce-overhead",
# "max-autotune") are left out: the graph's static buffers would be shared across the rotated inputs.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")


@define
class VerifyOptions:
    trials: int = 5  # fresh-seed random trials (at least 5 are run whatever is asked)
    adversarial: bool = True  # NaN / ±Inf / denormals / ±0 / large magnitudes
    timing: bool = True
    profile: bool = False  # Nsight Compute
    sanitize: bool = False  # compute-sanitizer memcheck + racecheck
    timeout_s: float = 300.0
    gpu_index: int = 0
    compile_baseline: bool = True  # torch.compile in the timing
    # torch.compile's mode for that baseline: "default" or "max-autotune-no-cudagraphs" (COMPILE_MODES).
    compile_mode: str = "default"
    # "cuda", or "cpu": a test mode that runs pure-PyTorch candidates without a GPU
    # (no CUDA kernel is exercised; the verdict says so).
    device: str = "cuda"
    second_shape: bool = True  # sizes not multiples of any block size
    rtol: float | None = None  # None: by dtype
    atol: float | None = None
    timing_budget_s: float = 1.0  # the time cap of the interleaved timing rounds (they stop sooner once converged)
    # Ops the Coder left in PyTorch on purpose (Candidate.uncovered_ops): reported, not flagged.
    allowed_torch_ops: list[str] = field(factory=list)
    sanitizer_tools: list[str] = field(factory=lambda: ["memcheck", "racecheck"])
    # Answer a repeated question (same reference, candidate, options, GPU) from the verdict cache, and reuse
    # the worker's compiled torch.compile baseline. False: measure again through every layer.
    use_cache: bool = True
    # At most this much device memory for the whole verification (None: what the GPU has free).
    # A task whose checks cannot fit ends TOO_LARGE before anything runs.
    memory_limit_gib: float | None = None
    # fp32 | bf16 | fp16: the candidate's model is cast to it after it is built, as KernelBench's harness casts
    # both models (the reference's source carries the cast itself: stitch_lsp.task.precision.cast_source).
    precision: str = "fp32"


@define
class VerifyJob:
    """The worker's ``verify`` request: files already materialised by the parent."""

    reference_path: str
    candidate_path: str
    options: VerifyOptions = field(factory=VerifyOptions)
    cuda_files: list[str] = field(factory=list)  # paths next to the candidate
