"""How the template Coder's Emitter computes values: the index maps every value is read through
(``index_maps``), and the two kinds of value that take a code shape of their own, a pool's window
(``windows``) and a ``cat``'s branches (``cat``), as mixins of ``emitter.Emitter``."""
