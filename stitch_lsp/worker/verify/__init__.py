"""The ``verify`` request, in the worker: compile, check and time one candidate against its reference.

``run.py`` holds ``VerifyRun`` and ``handle``. ``VerifyRun`` is put together from one mixin per phase, in
the order a run takes them:

- ``loading``: the device, the reference and the candidate, the memory plan, the two models;
- ``trials``: the seeded and adversarial trials; ``float64``: what is judged against a float64 run of the
  reference (a failed trial again, small outputs, the accuracy figure);
- ``dynamic_checks``: the anti-hacking checks that run the candidate (guarded forward, profiler streams);
- ``timing_phase``: the interleaved timing and the extra scrutiny of a large speedup;
- ``second_shape``: the pair at other sizes, last of all GPU work;
- ``reply``: the verdict's status and summary.

What they share is ``state.RunState``; ``failures`` turns an exception into words and ends a run early
(``Stop``). ``compare`` (outputs against the reference, slice by slice) and ``accuracy`` (error against
float64) are the run's measuring tools.
"""
