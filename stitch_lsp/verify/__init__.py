"""The Verifier: compile, check, time, profile and sanitize candidates through a worker.

Entry point: ``stitch_lsp.verify.service.Verifier``. Nothing here imports torch.
"""
