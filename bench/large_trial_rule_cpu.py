"""Does the Verifier's float64 judgement pass an fp32 GEMM exactly as accurate as eager's? On the CPU.

A GEMM (8192 -> 8192, 1024 rows) + bias, clamp to [-1, 1], Mish, GroupNorm over groups of 32, on the
adversarial "large" trial's inputs (uniform [0, 1) times 1e4): nearly every GEMM output saturates the clamp,
and where one of a group's values lands just inside it, GroupNorm divides by a spread near sqrt(eps), so the
GEMM's last bits show. The candidate is eager's own fp32 GEMM with the sum taken in another order (as accurate,
rounded differently), judged by ``stitch_lsp.worker.verify.compare`` as a failed trial is: each value within the
tolerance plus 2x eager's error at that value, against float64.

    python bench/large_trial_rule_cpu.py      # ~1 min and ~3 GB on two cores
"""

import time

import torch

from stitch_lsp.worker.verify.compare import compare

M, K, N, GROUPS = 1024, 8192, 8192, 256


def main() -> None:
    torch.manual_seed(0)
    started = time.time()
    lin = torch.nn.Linear(K, N)
    w, b1 = lin.weight.detach(), lin.bias.detach()
    b2 = torch.randn(N)
    x = torch.rand(M, K) * 1e4

    def tail(y: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.mish(torch.clamp(y + b2.to(y.dtype), -1, 1))
        return torch.nn.functional.group_norm(y, GROUPS, eps=1e-5)

    y64 = x.double() @ w.double().T + b1.double()
    ref64 = tail(y64)
    eager_y = torch.addmm(b1, x, w.T)
    eager = tail(eager_y)
    half = K // 2
    others = {
        "fp32, K summed in two halves": torch.addmm(b1, x[:, :half], w[:, :half].T) + x[:, half:] @ w[:, half:].T,
        "fp32, K summed in reverse": torch.addmm(b1, x.flip(1), w.flip(1).T),
    }

    def rms(e: torch.Tensor) -> float:
        return float(e.double().pow(2).mean().sqrt())

    print(f"eager: GEMM error rms {rms(eager_y.double() - y64):.2e}, output error max "
          f"{float((eager.double() - ref64).abs().max()):.3g}; GEMM outputs inside the clamp: "
          f"{int(((y64 + b2.double()).abs() < 1).sum())} of {M * N}")
    for name, y in others.items():
        out = tail(y)
        vs_eager = compare(eager, out)
        judged = compare(eager, out, ref64=ref64, eager_multiple=2.0)
        print(f"{name}: GEMM error rms {rms(y.double() - y64):.2e} | against eager: {vs_eager.mismatches} off, "
              f"max {vs_eager.max_abs:.3g} | against float64: passed={judged.passed}, {judged.mismatches} off, "
              f"max error {judged.max_abs:.3g} (eager's {judged.eager_max_abs:.3g})")
    print(f"{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
