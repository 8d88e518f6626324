"""The Planner's stage: a traced graph → fusion groups with their bytes, FLOPs and floors. Owns the op table,
fusion groups, reduction domains, and the classification of library calls, GEMMs and their tiles."""
