"""``stitch bench``: run the Coder and the Verifier over a directory of KernelBench tasks.

Plain logic, no torch: ``tasks`` finds and filters the task files; an executor
(``executor``: one ``shard`` process per local GPU, or ``ray_executor``: one
``ray_actor`` per GPU of a Ray cluster) provides the GPU workers; ``scheduler``
hands them tasks; ``store`` keeps one JSON per finished task (resume), ``stats``
computes fast_p and geometric means, ``table`` renders what the user reads.
``candidate_pool`` lends the same workers to the LLM Coder to verify a round's
candidates at once; ``versions`` checks that a cluster runs what this machine runs.
"""
