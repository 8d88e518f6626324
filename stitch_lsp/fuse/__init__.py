"""The fuse service: task → plan → Coder → Verifier → edit, for the editor, ``stitch fuse`` and ``stitch bench``."""
