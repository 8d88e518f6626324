"""``stitch bench``: run the Coder and the Verifier over a directory of KernelBench tasks.

Plain logic, no torch: ``tasks`` finds and filters the task files, ``shard`` runs
them one GPU per child process, ``scheduler`` hands tasks to those children,
``store`` keeps one JSON per finished task (resume), ``stats`` computes fast_p and
geometric means, ``table`` renders what the user reads.
"""
