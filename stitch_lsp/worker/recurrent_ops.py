"""nn.LSTM, nn.GRU and nn.RNN traced as the one library call each is on a GPU (cuDNN's recurrent kernels).

Traced as written, a recurrent module's call decomposes into its cell, once per step, layer and direction: a
6-layer GRU over 512 steps is 67,000 graph nodes, minutes of tracing, and thousands of small kernels that
cannot beat cuDNN's persistent ones. During tracing the module's ``torch._VF`` call goes to an opaque op of
ours, with only a fake (shape) implementation; the graph then names the ATen op the module calls
(``aten.lstm.input``, ...), and the candidate calls it as a library call, as it does cuBLAS and cuDNN.
Packed sequences take the module's own path (they are traced as written).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

# our opaque op -> the ATen op the module calls (same arguments, same outputs)
ATEN_NAMES = {
    "stitch_rnn.lstm.default": "aten.lstm.input",
    "stitch_rnn.gru.default": "aten.gru.input",
    "stitch_rnn.rnn_tanh.default": "aten.rnn_tanh.input",
    "stitch_rnn.rnn_relu.default": "aten.rnn_relu.input",
}
_KINDS = ("lstm", "gru", "rnn_tanh", "rnn_relu")
_defined: dict[str, Any] = {}


def _output_shape(input: Any, state: Any, bidirectional: bool, batch_first: bool) -> list:
    # The last layer's outputs: one per step, num_directions * the state's width (proj_size where LSTM has it).
    width = (2 if bidirectional else 1) * state.shape[-1]
    if input.dim() == 2:  # unbatched: (steps, features)
        return [input.shape[0], width]
    return [input.shape[0], input.shape[1], width]


def _ops() -> dict[str, Any]:
    """The opaque ops, defined once per process (torch.library keeps them for its lifetime)."""
    if _defined:
        return _defined
    import torch

    lib = torch.library.Library("stitch_rnn", "DEF")
    _defined["_lib"] = lib
    lib.define("lstm(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, "
               "bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)")
    for kind in _KINDS[1:]:
        lib.define(f"{kind}(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, "
                   "float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)")

    def lstm_fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        out = input.new_empty(_output_shape(input, hx[0], bidirectional, batch_first))
        return out, hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)

    def cell_fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        return input.new_empty(_output_shape(input, hx, bidirectional, batch_first)), hx.new_empty(hx.shape)

    for kind in _KINDS:
        # Shapes only: tracing runs the model on the meta device under fake tensors, never for real.
        lib.impl(kind, lstm_fake if kind == "lstm" else cell_fake, "Meta")
        torch.library.register_fake(f"stitch_rnn::{kind}", lstm_fake if kind == "lstm" else cell_fake, lib=lib)
        _defined[kind] = getattr(torch.ops.stitch_rnn, kind).default
    return _defined


@contextlib.contextmanager
def recurrent_as_library_calls() -> Iterator[None]:
    """While tracing, a recurrent module's unpacked call is one opaque op (see the module's docstring)."""
    import torch

    ops = _ops()
    vf = torch._VF
    saved = {kind: vf.__dict__.get(kind) for kind in _KINDS}

    def opaque(kind: str, original: Any) -> Any:
        def call(*args: Any) -> Any:
            # Unpacked: (input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first).
            if len(args) != 9 or not isinstance(args[3], bool):
                return original(*args)
            return ops[kind](*args)
        return call

    for kind in _KINDS:
        setattr(vf, kind, opaque(kind, getattr(vf, kind)))
    try:
        yield
    finally:
        for kind, before in saved.items():
            if before is None:
                vf.__dict__.pop(kind, None)
            else:
                setattr(vf, kind, before)
