"""The decomposition table the trace uses: aten's core decompositions plus ours for the normalisations and
softmaxes.

Ours spell each op as pointwise work and last-dimension reductions in float32,
the form the template Coder fuses; aten's own versions of these are either kept
whole by the core table or go through prims that are harder to lower.
"""

from __future__ import annotations

import math

import torch
from torch._decomp import core_aten_decompositions


def _acc(x):
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def softmax(x, dim, half_to_float):
    xf = _acc(x)
    e = torch.exp(xf - torch.amax(xf, dim, keepdim=True))
    out = e / torch.sum(e, dim, keepdim=True)
    return out if half_to_float else out.to(x.dtype)


def log_softmax(x, dim, half_to_float):
    xf = _acc(x)
    shifted = xf - torch.amax(xf, dim, keepdim=True)
    out = shifted - torch.log(torch.sum(torch.exp(shifted), dim, keepdim=True))
    return out if half_to_float else out.to(x.dtype)


def layer_norm(x, normalized_shape, weight, bias, eps):
    dims = list(range(x.dim() - len(normalized_shape), x.dim()))
    xf = _acc(x)
    mean = torch.mean(xf, dims, keepdim=True)
    centered = xf - mean
    rstd = torch.rsqrt(torch.mean(centered * centered, dims, keepdim=True) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype), mean, rstd


def group_norm(x, weight, bias, n, c, hxw, groups, eps):
    xf = _acc(x).reshape(n, groups, (c // groups) * hxw)
    mean = torch.mean(xf, [2], keepdim=True)
    centered = xf - mean
    rstd = torch.rsqrt(torch.mean(centered * centered, [2], keepdim=True) + eps)
    out = (centered * rstd).reshape(n, c, hxw)
    if weight is not None:
        out = out * weight.reshape(1, c, 1)
    if bias is not None:
        out = out + bias.reshape(1, c, 1)
    return out.reshape(x.shape).to(x.dtype), mean.reshape(n, groups), rstd.reshape(n, groups)


def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    # Per-channel scale and shift with the running statistics: pointwise work a GEMM epilogue can take.
    shape = [1, -1] + [1] * (x.dim() - 2)
    xf = _acc(x)
    out = (xf - running_mean.reshape(shape)) * torch.rsqrt(running_var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    empty = x.new_empty((0,), dtype=xf.dtype)
    return out.to(x.dtype), empty, empty


def var_mean(x, dims=None, *, correction=None, keepdim=False):
    dims = list(range(x.dim())) if dims is None else list(dims)
    mean = torch.mean(x, dims, keepdim=True)
    centered = x - mean
    count = math.prod(x.shape[d] for d in dims)
    corr = 1 if correction is None else correction
    var = torch.sum(centered * centered, dims, keepdim=keepdim) / max(count - corr, 0)
    return var, (mean if keepdim else mean.squeeze(dims))


def var(x, dims=None, *, correction=None, keepdim=False):
    return var_mean(x, dims, correction=correction, keepdim=keepdim)[0]


def split_with_sizes(x, sizes, dim=0):
    out, start = [], 0
    for size in sizes:
        out.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start += size
    return out


def split(x, size, dim=0):
    total = x.shape[dim]
    sizes = [min(size, total - s) for s in range(0, total, size)]
    return split_with_sizes(x, sizes, dim)


def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    # Statistics over every dimension but the channels (1), the normalised output, and (training with
    # running statistics) their update in place, which functionalisation turns into copies at the end.
    dims = [0] + list(range(2, x.dim()))
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    xf = _acc(x)
    if training or running_mean is None:
        mean = torch.mean(xf, dims, keepdim=True)
        centered = xf - mean
        var = torch.mean(centered * centered, dims, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        if training and running_mean is not None:
            n = xf.numel() // xf.shape[1]
            running_mean.copy_(running_mean * (1 - momentum) + mean.reshape(-1) * momentum)
            running_var.copy_(running_var * (1 - momentum) + var.reshape(-1) * (momentum * n / max(n - 1, 1)))
    else:
        mean = running_mean.reshape(shape)
        centered = xf - mean
        rstd = torch.rsqrt(running_var.reshape(shape) + eps)
    out = centered * rstd
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out.to(x.dtype), mean.reshape(-1), rstd.reshape(-1)


def batch_norm_legit(x, weight, bias, running_mean, running_var, training, momentum, eps):
    return batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


def batch_norm_no_stats(x, weight, bias, training, momentum, eps):
    return batch_norm(x, weight, bias, None, None, True, momentum, eps)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    xf = x.to(dtype) if dtype is not None else x
    dims = list(range(xf.dim())) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if ord == 2:
        return torch.sqrt(torch.sum(xf * xf, dims, keepdim=keepdim))
    if ord == 1:
        return torch.sum(torch.abs(xf), dims, keepdim=keepdim)
    if ord == float("inf"):
        return torch.amax(torch.abs(xf), dims, keepdim=keepdim)
    if ord == float("-inf"):
        return torch.amin(torch.abs(xf), dims, keepdim=keepdim)
    if ord == 0:
        return torch.sum((xf != 0).to(xf.dtype), dims, keepdim=keepdim)
    return torch.pow(torch.sum(torch.pow(torch.abs(xf), ord), dims, keepdim=keepdim), 1.0 / ord)


def clamp_tensor(x, min=None, max=None):
    """``clamp`` with tensor bounds as its lower bound, then its upper one (each a pointwise template); min
    above max gives max, as eager's clamp does."""
    if min is not None:
        x = torch.ops.aten.clamp_min.Tensor(x, min)
    if max is not None:
        x = torch.ops.aten.clamp_max.Tensor(x, max)
    return x


def _extreme_dim(value, position):
    # max / min over a dim as the value and its first position: two reductions the Coder fuses in one pass.
    return lambda x, dim, keepdim=False: (value(x, [dim], keepdim), position(x, dim, keepdim))


def decomposition_table() -> dict:
    """A fresh table for one ``make_fx`` (aten's core table, ours over it)."""
    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table[aten._native_batch_norm_legit.default] = batch_norm_legit
    table[aten._native_batch_norm_legit.no_stats] = batch_norm_no_stats
    table[aten.native_batch_norm.default] = batch_norm
    table[aten.linalg_vector_norm.default] = vector_norm
    table[aten.max.dim] = _extreme_dim(torch.amax, torch.argmax)
    table[aten.min.dim] = _extreme_dim(torch.amin, torch.argmin)
    # Tensor bounds as the two one-sided clamps, each a pointwise template (aten's table turns those two into
    # the two-sided one).
    table[aten.clamp.Tensor] = clamp_tensor
    table.pop(aten.clamp_min.Tensor, None)
    table.pop(aten.clamp_max.Tensor, None)
    # Kept whole: PyTorch's own kernel draws the random numbers, so the candidate's match eager's.
    for kept in (aten.native_dropout.default, aten.dropout.default):
        table.pop(kept, None)
    # Kept whole: an index map the kernels read through (a shifted window's cyclic shift), where its
    # decomposition is an arange, an fmod and an index_select.
    table.pop(aten.roll.default, None)
    table[aten.split_with_sizes.default] = split_with_sizes
    table[aten.split.Tensor] = split
    table[aten._softmax.default] = softmax
    table[aten._log_softmax.default] = log_softmax
    table[aten.native_layer_norm.default] = layer_norm
    table[aten.native_group_norm.default] = group_norm
    table[aten.var_mean.correction] = var_mean
    table[aten.var.correction] = var
    table[aten._native_batch_norm_legit_no_training.default] = batch_norm_inference
    return table
