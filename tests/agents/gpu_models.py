"""Shared by the GPU kernel tests: a reference and its template-Coder candidate on the device, and the check that
they agree on random and adversarial inputs."""

from __future__ import annotations

import types


def reference_and_candidate(name: str, source: str, candidate_source: str):
    """(the reference module, its Model, the candidate's ModelNew with the same weights), on the GPU."""
    import torch

    ref_mod = types.ModuleType(f"ref_{name}")
    exec(compile(source, "reference", "exec"), ref_mod.__dict__)
    cand_mod = types.ModuleType(f"cand_{name}")
    exec(compile(candidate_source, "candidate", "exec"), cand_mod.__dict__)
    with torch.device("cuda"):
        torch.manual_seed(0)
        ref = ref_mod.Model(*ref_mod.get_init_inputs())
        torch.manual_seed(0)
        cand = cand_mod.ModelNew(*ref_mod.get_init_inputs())
    cand.load_state_dict(ref.state_dict())
    return ref_mod, ref.cuda(), cand.cuda()


def assert_matches_eager(ref_mod, ref, cand, cases=("random", "nan", "inf", "large", "denormal")) -> None:
    """The candidate's outputs against the reference's, on the reference's inputs and their adversarial forms."""
    import torch

    from stitch_lsp.worker import inputs as inp
    from stitch_lsp.worker.verify.compare import compare

    for adversarial in cases:
        torch.manual_seed(1)
        values = [v.cuda() for v in ref_mod.get_inputs()]
        if adversarial != "random":
            values = inp.adversarial(values, adversarial, 3)
        with torch.no_grad():
            result = compare(ref(*[v.clone() for v in values]), cand(*[v.clone() for v in values]))
        assert result.passed, f"{adversarial}: {result.detail}"
