"""The ops a library runs: GEMMs (cuBLAS), convolutions (cuDNN), the pooling the template Coder does not
write (adaptive windows, a max pool whose indices are read) and attention (PyTorch's kernels).

The template Coder never writes these; it calls the library through torch and fuses
what comes after the call (``stitch_lsp.coders.template.library_call`` is where
a library group is lowered, the one seam a GEMM / convolution kernel family plugs
into). Plain data, no torch.
"""

from __future__ import annotations

GEMM_OPS = {
    "aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default",
    "aten._addmm_activation.default", "aten.addmv.default", "aten.mv.default",
    "stitch.gemm",  # the GEMM family's kernel: a GEMM and its epilogue (plan.gemm_match)
}
CONV_OPS = {
    "aten.convolution.default", "aten._convolution.default", "aten.conv1d.default", "aten.conv2d.default",
    "aten.conv3d.default", "aten.conv_transpose1d.default", "aten.conv_transpose2d.input",
    "aten.conv_transpose3d.input", "aten.cudnn_convolution.default",
}
# Max and average pooling with fixed windows over floating-point values are the template Coder's own
# kernels (``op_table.classify`` takes them first: ``pooling``); listed here for the other dtypes.
POOL_OPS = {
    "aten.max_pool1d.default", "aten.max_pool2d.default", "aten.max_pool3d.default",
    "aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default",
    "aten.avg_pool1d.default", "aten.avg_pool2d.default", "aten.avg_pool3d.default",
    "aten.adaptive_avg_pool1d.default", "aten.adaptive_avg_pool2d.default", "aten.adaptive_avg_pool3d.default",
    "aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default",
    "aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool3d.default",
}
ATTENTION_OPS = {
    "aten.scaled_dot_product_attention.default", "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default", "aten._scaled_dot_product_cudnn_attention.default",
    "stitch.attention_probs",  # softmax(q·kᵀ·scale [+ causal mask]) alone: the template Coder's kernel (plan.attention)
}
# Random numbers: PyTorch's own kernel draws them, so a candidate's are eager's (same generator, same order).
RANDOM_OPS = {"aten.native_dropout.default", "aten.bernoulli.p", "aten.bernoulli.default", "aten.rand_like.default",
              "aten.randn_like.default", "aten.rand.default", "aten.randn.default"}
# Recurrent modules (nn.LSTM, nn.GRU, nn.RNN) whole: cuDNN's persistent recurrent kernels run every step.
RNN_OPS = {"aten.lstm.input", "aten.gru.input", "aten.rnn_tanh.input", "aten.rnn_relu.input"}
_KINDS = {**{op: "gemm" for op in GEMM_OPS}, **{op: "rnn" for op in RNN_OPS}, **{op: "conv" for op in CONV_OPS},
          **{op: "pool" for op in POOL_OPS}, **{op: "attention" for op in ATTENTION_OPS},
          **{op: "random" for op in RANDOM_OPS}}
LIBRARY_OPS = frozenset(_KINDS)
# Who runs each kind, in the plan's and the messages' words.
RUNNER = {"gemm": "cuBLAS", "conv": "cuDNN", "rnn": "cuDNN's recurrent kernels", "pool": "PyTorch's pooling kernel",
          "attention": "PyTorch's fused attention", "random": "PyTorch's random number generator"}


# What a call dispatches to below PyTorch's own decomposition (attention picks its backend at run time):
# the Verifier's run-time guard sees these, so they are declared with the call.
DISPATCHES_TO = {
    **{op: ["aten._cudnn_rnn", "aten._cudnn_rnn_flatten_weight"] for op in RNN_OPS},
    "aten.scaled_dot_product_attention.default": [
        "aten._scaled_dot_product_efficient_attention", "aten._scaled_dot_product_flash_attention",
        "aten._scaled_dot_product_cudnn_attention", "aten._scaled_dot_product_attention_math",
        "aten._efficient_attention_forward", "aten._flash_attention_forward"],
}


# Why a pooling op stays a library call, for the plan's note.
POOL_WHY = {
    "aten.max_pool2d_with_indices.default": "its indices are read, and the generated pooling kernels give values only",
    "aten.max_pool3d_with_indices.default": "its indices are read, and the generated pooling kernels give values only",
}


def why_library(op: str) -> str:
    """Why ``op`` is a library call rather than a generated kernel, where that is a choice ("" otherwise)."""
    if op in POOL_WHY:
        return POOL_WHY[op]
    if "adaptive" in op:
        return "adaptive pooling has no template"
    if library_kind(op) == "pool":
        return "pooling kernels take float32 / float16 / bfloat16 values"
    return ""


def library_kind(op: str) -> str | None:
    """``gemm`` | ``conv`` | ``rnn`` | ``pool`` | ``attention`` | ``random`` for an op a library runs; None otherwise."""
    return _KINDS.get(op)


def runner(op: str) -> str:
    """Who runs ``op`` ("cuDNN", "cuBLAS", ...), for plans and messages."""
    kind = library_kind(op)
    return RUNNER.get(kind, "a library") if kind else "PyTorch"
