"""Replies that are and are not candidates, each with the reason the model is told."""

from __future__ import annotations

from stitch_lsp.coders.llm.reply import parse_reply

from .candidates import GOOD_CUDA, MODULE, reply


def test_a_well_formed_reply_is_a_candidate():
    parsed = parse_reply(reply(plan="Plan: one kernel, grid-stride."))
    assert parsed.ok, parsed.problem
    assert parsed.candidate.module_source == MODULE
    assert parsed.candidate.cuda_sources == {"kernel.cu": GOOD_CUDA}
    assert parsed.candidate.coder == "llm"
    assert parsed.plan == "Plan: one kernel, grid-stride."


def test_no_code_block():
    parsed = parse_reply("I think the kernel should use float4 loads.")
    assert not parsed.ok
    assert "no code block" in parsed.problem and "```cuda" in parsed.problem


def test_two_python_blocks():
    text = reply() + "\nAlternatively:\n```python\n" + MODULE + "```\n"
    parsed = parse_reply(text)
    assert not parsed.ok and "2 ```python blocks" in parsed.problem


def test_two_cuda_blocks():
    text = f"```cuda\n{GOOD_CUDA}```\n```cuda\n{GOOD_CUDA}```\n```python\n{MODULE}```\n"
    assert "2 ```cuda blocks" in parse_reply(text).problem


def test_code_in_the_wrong_language():
    text = "```triton\n@triton.jit\ndef k(x): pass\n```\n```python\n" + MODULE + "```\n"
    parsed = parse_reply(text)
    assert not parsed.ok and "wrong language (```triton)" in parsed.problem


def test_cuda_tagged_cpp_is_told_to_use_the_cuda_tag():
    text = f"```cpp\n{GOOD_CUDA}```\n```python\n{MODULE}```\n"
    assert "tagged ```cpp" in parse_reply(text).problem


def test_untagged_block():
    text = f"```\n{GOOD_CUDA}```\n```python\n{MODULE}```\n"
    assert "no language tag" in parse_reply(text).problem


def test_missing_import_is_refused_with_the_line():
    module = MODULE.replace("import torch\n", "import torch\nimport cupy_kernels_helper\n", 1)
    parsed = parse_reply(reply(module=module))
    assert not parsed.ok
    assert "Line 4 imports `cupy_kernels_helper`, which is not available" in parsed.problem


def test_threads_are_refused():
    module = MODULE.replace("import torch\n", "import torch\nimport threading\n", 1)
    assert "may not use" in parse_reply(reply(module=module)).problem


def test_other_stitch_modules_are_refused():
    module = MODULE.replace("import torch\n", "import torch\nfrom stitch_lsp.verify import service\n", 1)
    assert "only `stitch_lsp.runtime.loader`" in parse_reply(reply(module=module)).problem


def test_python_syntax_error_names_the_line():
    module = MODULE.replace("def forward(self, x):", "def forward(self, x)")
    line = MODULE.splitlines().index("    def forward(self, x):") + 1
    assert f"does not parse: line {line}" in parse_reply(reply(module=module)).problem


def test_module_without_model_new():
    assert "does not define `class ModelNew`" in parse_reply(reply(module=MODULE.replace("ModelNew", "Fast"))).problem


def test_module_that_never_loads_the_kernel():
    module = MODULE.replace("from stitch_lsp.runtime.loader import load_kernel\n", "").replace(
        'load_kernel(_SOURCE, "relu_scale_kernel", filename="kernel.cu")', "None")
    assert "load_kernel" not in module
    assert "never calls `stitch_lsp.runtime.loader.load_kernel`" in parse_reply(reply(module=module)).problem


def test_host_code_in_the_cuda_block_is_refused():
    host = GOOD_CUDA + "\nvoid launch(float* x) { relu_scale_kernel<<<1, 256>>>(x, x, 1.0f, 1); }\n"
    problem = parse_reply(reply(cuda=host)).problem
    assert "launches kernels from C++" in problem and "NVRTC as device code only" in problem
    torch_ext = "#include <torch/extension.h>\n" + GOOD_CUDA
    assert "includes PyTorch / pybind11 headers (line 1)" in parse_reply(reply(cuda=torch_ext)).problem


def test_cuda_without_a_kernel():
    assert "no `__global__` kernel" in parse_reply(reply(cuda="int helper() { return 1; }\n")).problem


def test_a_reply_cut_at_the_token_limit():
    text = reply()[:300]
    parsed = parse_reply(text, stop_reason="max_tokens", max_tokens=1024)
    assert not parsed.ok
    assert "cut off" in parsed.problem and "token limit (1024 output tokens)" in parsed.problem
    assert "```cuda block that starts at line 3" in parsed.problem


def test_complete_files_before_the_token_limit_are_accepted():
    assert parse_reply(reply() + "\nSome closing remarks that were cu", stop_reason="max_tokens").ok


def test_longer_fences_and_nested_backticks():
    module = MODULE.replace("super().__init__()", 'super().__init__()\n        self.doc = "use ``` fences"')
    text = f"````cuda\n{GOOD_CUDA}````\n````python\n{module}````\n"
    parsed = parse_reply(text)
    assert parsed.ok, parsed.problem
    assert 'use ``` fences' in parsed.candidate.module_source
