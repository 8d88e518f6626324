"""Shapes from the user's own run: ``stitch record -- python train.py`` and the recordings under ``.stitch/``.

``site/`` is put on the user's ``PYTHONPATH`` for that one run (stdlib only: it runs in
their interpreter, with their environment); ``store`` reads what it wrote, in the
server and the CLI, without running anything.
"""
