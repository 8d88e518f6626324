"""The reduction kernels' parts: what a group's reductions are (``analysis``), the C building blocks every shape
shares (``emit``), the row kernel (``row_kernel``, with its passes, its partial results and its team role as
mixins of their own) and the column kernel (``columns``).

Which shape a group takes is ``reductions``' choice; the shapes and their figures are ``reduction_kernels``'
(read through that module, so a sweep or a test that sets a figure steers every kernel here).
"""
