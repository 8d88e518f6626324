"""Fuzz suite settings: seeded, bounded, and larger on request.

Environment: ``STITCH_FUZZ_MESSAGES`` (frames of malformed / odd JSON-RPC, default
10,000), ``STITCH_FUZZ_SEQUENCES`` (edit sequences, default 2,000),
``STITCH_FUZZ_SEED`` (default 17). A longer run:
``STITCH_FUZZ_MESSAGES=200000 STITCH_FUZZ_SEQUENCES=40000 python -m pytest tests/fuzz``.
"""

from __future__ import annotations

import os

MESSAGES = int(os.environ.get("STITCH_FUZZ_MESSAGES", "10000"))
SEQUENCES = int(os.environ.get("STITCH_FUZZ_SEQUENCES", "2000"))
SEED = int(os.environ.get("STITCH_FUZZ_SEED", "17"))
