"""The real Verifier, on the CPU: the fault tests' seam on machines without a GPU.

Test-only, loaded by the server when ``STITCH_TEST_VERIFIER=tests.faults.cpu_verifier:CpuVerifier``.
Everything is the product's own — worker pool, worker process, job files,
verdicts — except that jobs run in the Verifier's CPU test mode (``device="cpu"``)
and the device is reported as a stand-in, so paired kernels with a Python
``binding`` reach the worker. A binding that never launches its kernel is a pure
PyTorch candidate: enough to make the worker import, run, crash, hang or run out
of memory the way a real one can.
"""

from __future__ import annotations

import attrs

from stitch_lsp.verdict import DeviceInfo
from stitch_lsp.verify.service import Verifier

DEVICE = DeviceInfo(name="CPU stand-in (fault tests)", compute_capability="9.0", sm_count=1, driver="test",
                    cuda="13.0", torch="cpu")


class CpuVerifier(Verifier):
    def device_info(self) -> DeviceInfo:
        return DEVICE

    def verify(self, reference_source, candidate, options=None, **kwargs):
        from stitch_lsp.contract.verify import VerifyOptions

        options = attrs.evolve(options or VerifyOptions(), device="cpu", timing=False, trials=5)
        return super().verify(reference_source, candidate, options, **kwargs)

    def _profile_and_sanitize(self, verdict, job, options, cancel, report):
        # As on a GPU machine: Nsight Compute and compute-sanitizer are looked up (the tests
        # run it with a PATH that has neither, so nothing is started).
        super()._profile_and_sanitize(verdict, job, attrs.evolve(options, device="cuda"), cancel, report)
