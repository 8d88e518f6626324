"""The ``verify`` request, in the worker: compile, check and time one candidate against its reference.

``run.py`` holds ``VerifyRun`` and ``handle``; the run's output comparison (``compare.py``) and its
accuracy against a float64 run of the reference (``accuracy.py``) sit beside it.
"""
