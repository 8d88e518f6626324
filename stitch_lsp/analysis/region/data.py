"""What the analysis of a selection gives the Task builder: the Region and the module attributes it uses."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.findings import Range


@define
class SelfNeed:
    """An attribute of the enclosing module the selection uses (``self.norm``, ``self.scale``)."""

    name: str
    kind: str  # module | parameter | buffer | attribute | unknown
    init_source: str = ""  # the right-hand side in __init__ (constructor call or value)
    line: int | None = None  # 0-based line in __init__


@define
class Region:
    path: str
    range: Range  # the selected statements, whole lines
    function: str = ""
    class_name: str | None = None
    function_params: list[str] = field(factory=list)  # of the enclosing function, without self
    inputs: list[str] = field(factory=list)  # free variables, in order of first use
    outputs: list[str] = field(factory=list)  # assigned here and used afterwards
    returns: bool = False  # the selection ends with `return ...`
    return_expr: str = ""
    body: str = ""  # the selected statements, dedented
    indent: str = ""
    ops: list[str] = field(factory=list)  # e.g. ["self.lin", "F.gelu", "*"]
    self_needs: list[SelfNeed] = field(factory=list)
    module_names: dict[str, str] = field(factory=dict)  # module-level constants used: name -> source
    imports: list[str] = field(factory=list)  # the file's top-level import statements
    init_params: list[tuple[str, str | None]] = field(factory=list)  # __init__ params and their defaults
    # ``name = expr`` statements of __init__ (``inner = dim * 4``) that re-created attributes may use.
    init_locals: dict[str, str] = field(factory=dict)
    # Every ``__init__`` statement the used attributes need (locals, ModuleDicts, lambdas, buffers in
    # branches): 0-based line -> dedented text, in file order.
    init_statements: dict[int, str] = field(factory=dict)
    methods: dict[str, str] = field(factory=dict)  # the class's methods the selection calls: name -> source
    helpers: dict[str, str] = field(factory=dict)  # the file's functions / classes it needs: name -> source
    nesting: list[str] = field(factory=list)  # "else: of the if on line 62" when inside a branch or loop
    # The function's simple statements that run before the selection (``B, T, C = x.size()``), dedented:
    # what the shape template reads to know which inputs are ints and how dimensions tie together.
    prelude: list[str] = field(factory=list)
    problems: list[str] = field(factory=list)

    @property
    def fusable(self) -> bool:
        return not self.problems

    @property
    def op_count(self) -> int:
        return len(self.ops)

