"""Building a function's facts (cuda_facts.FunctionFacts): one query pass over its body gathers what
it holds; the steps after it need all of it (which declaration a name means, its definitions, calls,
accesses and launches), because the query's matches come in no useful order."""

from __future__ import annotations

from attrs import define, field
from tree_sitter import Node, QueryCursor

from stitch_lsp.analysis import budget
from stitch_lsp.analysis.cuda_consts import Constants
from stitch_lsp.analysis.cuda_declarations import function_header, local_declarations, template_params
from stitch_lsp.analysis.cuda_facts import ATOMICS, Access, Call, Control, FunctionFacts, Launch, index_expr
from stitch_lsp.analysis.cuda_grammar import facts_query
from stitch_lsp.analysis.cuda_launch import block_threads as launch_block_threads, grid_divisions
from stitch_lsp.analysis.cuda_model import LaunchInfo
from stitch_lsp.analysis.cuda_text import Columns, node_text, operands, squash


@define(slots=True)
class _Scan:
    """What the query pass leaves for the steps that need the whole body."""

    bare_calls: set[int] = field(factory=set)
    launch_stmts: dict[int, Node] = field(factory=dict)
    write_targets: dict[int, int] = field(factory=dict)  # subscript node id -> evaluation order
    compound_targets: set[int] = field(factory=set)
    raw_calls: list[tuple[str, Node, bool]] = field(factory=list)
    plain_defs: list[tuple[Node, Node]] = field(factory=list)  # (assigned identifier, value)
    subscripts: list[Node] = field(factory=list)
    launches: list[tuple[Node, Node]] = field(factory=list)


def build_facts(src: bytes, cols: Columns, consts: Constants, fn: Node, unit: Node,
                conditional: tuple[tuple[int, int], ...] = ()) -> FunctionFacts | None:
    facts = _header_facts(src, cols, consts, fn, unit, conditional)
    if facts is None or facts.body is None:
        return facts
    budget.check_depth(facts.body)
    matches = QueryCursor(facts_query()).matches(facts.body)
    budget.check()
    scan = _scan(facts, matches)
    facts.numbers.sort(key=lambda n: n.start_byte)  # right operands were found at their expression
    _assign_keys(facts)
    _add_definitions(facts, scan.plain_defs)
    _add_calls(facts, scan)
    _add_accesses(facts, scan)
    _add_launches(facts, scan)
    facts.controls.sort(key=lambda c: (c.node.start_byte, -c.end))
    return facts


def _header_facts(src: bytes, cols: Columns, consts: Constants, fn: Node, unit: Node,
                  conditional: tuple[tuple[int, int], ...]) -> FunctionFacts | None:
    """The facts the declaration gives (name, qualifiers, parameters), or None when it names no function."""
    header = function_header(src, cols, fn)
    if header is None:
        return None
    name_node, is_global, is_device, lb, params = header
    return FunctionFacts(
        src=src, cols=cols, consts=consts, node=fn, unit=unit, name=node_text(src, name_node),
        name_node=name_node, is_global=is_global, is_device=is_device,
        is_host_code=not (is_global or is_device), template_params=template_params(src, unit),
        params=params, launch_bounds=lb, body=fn.child_by_field_name("body"), conditional=conditional,
    )


# ---- the query pass -----------------------------------------------------------


def _scan(facts: FunctionFacts, matches) -> _Scan:
    """One pass over the query's matches: what stands alone goes straight into the facts."""
    src = facts.src
    scan = _Scan()
    for _, caps in matches:
        if "call" in caps:
            scan.raw_calls.append((node_text(src, caps["call.name"][0]), caps["call"][0], False))
        elif "method" in caps:
            scan.raw_calls.append((node_text(src, caps["method.name"][0]), caps["method"][0], True))
        elif "bare" in caps:
            scan.bare_calls.add(caps["bare"][0].id)
        elif "launch.stmt" in caps:
            stmt = caps["launch.stmt"][0]
            call = operands(stmt)[0] if operands(stmt) else None
            if call is not None:
                scan.launch_stmts[call.id] = stmt
        elif "launch" in caps:
            scan.launches.append((caps["launch"][0], caps["launch.config"][0]))
        elif "subscript" in caps:
            scan.subscripts.append(caps["subscript"][0])
        elif "assign" in caps:
            _note_assign(facts, scan, caps["assign"][0])
        elif "update" in caps:
            _note_update(facts, scan, caps["update"][0])
        elif "decl" in caps:
            facts.decls.extend(local_declarations(src, caps["decl"][0]))
        elif "if" in caps:
            facts.controls.append(_control("if", caps["if"][0]))
        elif "loop" in caps:
            facts.controls.append(_control("loop", caps["loop"][0]))
        elif "ternary" in caps:
            facts.controls.append(_control("ternary", caps["ternary"][0]))
        elif "preproc" in caps:
            facts.preprocs.append(caps["preproc"][0])
        elif "number" in caps:
            facts.numbers.append(caps["number"][0])
        elif "binary" in caps:
            _note_binary(facts, caps["binary"][0])
        elif "mul" in caps:
            names = {node_text(src, caps["mul.a"][0]), node_text(src, caps["mul.b"][0])}
            if names == {"blockIdx", "blockDim"}:
                facts.builtin_products.append(caps["mul"][0])
    return scan


def _note_assign(facts: FunctionFacts, scan: _Scan, a: Node) -> None:
    facts.assigns.append(a)
    left = a.child_by_field_name("left")
    right = a.child_by_field_name("right")
    op = a.child_by_field_name("operator")
    if left is not None:
        scan.write_targets[left.id] = a.end_byte
        if op is not None and node_text(facts.src, op) != "=":
            scan.compound_targets.add(left.id)
        if left.type == "identifier" and right is not None:
            scan.plain_defs.append((left, right))


def _note_update(facts: FunctionFacts, scan: _Scan, u: Node) -> None:
    facts.updates.append(u)
    arg = u.child_by_field_name("argument")
    if arg is not None:
        scan.write_targets[arg.id] = u.end_byte
        scan.compound_targets.add(arg.id)


def _note_binary(facts: FunctionFacts, binary: Node) -> None:
    """A literal operand (and what it meets), and `a % b`."""
    left, right = binary.child_by_field_name("left"), binary.child_by_field_name("right")
    if right is not None and right.type == "number_literal":
        facts.numbers.append(right)
        if left is not None:
            facts.number_operands[right.id] = left
    if left is not None and left.type == "number_literal" and right is not None:
        facts.number_operands[left.id] = right
    op = binary.child_by_field_name("operator")
    if op is not None and op.type == "%":
        facts.mods.append(binary)


def _control(kind: str, node: Node) -> Control:
    if kind == "if":
        cond = node.child_by_field_name("condition")
        cons = node.child_by_field_name("consequence")
        gov = cons.start_byte if cons is not None else node.end_byte
    elif kind == "ternary":
        cond = node.child_by_field_name("condition")
        cons = node.child_by_field_name("consequence")
        gov = cons.start_byte if cons is not None else node.end_byte
    else:  # loops: the condition decides whether the body runs again, so it governs everything after it
        cond = node.child_by_field_name("condition")
        gov = node.start_byte
        if node.type == "for_statement":
            init = node.child_by_field_name("initializer")
            gov = init.end_byte if init is not None else node.start_byte
    if cond is not None and cond.type == "condition_clause":
        cond = cond.child_by_field_name("value") or cond
    if cond is not None and cond.type == "parenthesized_expression" and len(operands(cond)) == 1:
        cond = operands(cond)[0]
    return Control(kind=kind, node=node, cond=cond, gov_start=gov, end=node.end_byte)


# ---- names and definitions ------------------------------------------------------

_SCOPES = frozenset({"compound_statement", "for_statement", "for_range_loop", "if_statement", "while_statement",
                     "switch_statement", "function_definition", "lambda_expression"})


def _scope_end(decl: Node) -> int:
    """Where the scope a local declaration belongs to ends."""
    n = decl.parent
    while n is not None and n.type not in _SCOPES:
        n = n.parent
    return n.end_byte if n is not None else decl.end_byte


def _assign_keys(facts: FunctionFacts) -> None:
    """Give each of several declarations of one name its own key (see FunctionFacts.key_at)."""
    seen: dict[str, int] = {p.info.name: 1 for p in facts.params}
    for d in facts.decls:
        seen[d.name] = seen.get(d.name, 0) + 1
    multi = {name for name, n in seen.items() if n > 1}
    if not multi:
        for d in facts.decls:
            d.key = d.name
        return
    scoped: dict[str, list[tuple[int, int, str]]] = {}
    body_end = facts.node.end_byte
    for p in facts.params:
        if p.info.name in multi:
            scoped.setdefault(p.info.name, []).append((facts.node.start_byte, body_end, p.info.name))
    for d in facts.decls:
        if d.name not in multi:
            d.key = d.name
            continue
        entries = scoped.setdefault(d.name, [])
        d.key = d.name if not entries else f"{d.name}#{len(entries) + 1}"
        entries.append((d.declarator.start_byte, _scope_end(d.node), d.key))
    for entries in scoped.values():
        entries.sort()
    facts._scoped = scoped


def _add_definitions(facts: FunctionFacts, plain_defs: list[tuple[Node, Node]]) -> None:
    """name -> the values assigned to it: declarations' first, then `name = value` in the body."""
    for d in facts.decls:
        if d.value is not None:
            facts.defs.setdefault(d.key, []).append(d.value)
    for left, right in plain_defs:
        facts.defs.setdefault(facts.key_of(left), []).append(right)


# ---- calls, accesses, launches ----------------------------------------------------


def _add_calls(facts: FunctionFacts, scan: _Scan) -> None:
    for name, node, is_method in scan.raw_calls:
        args_node = node.child_by_field_name("arguments")
        args = tuple(operands(args_node)) if args_node is not None else ()
        call = Call(name=name, node=node, args=args, bare=node.id in scan.bare_calls)
        (facts.method_calls if is_method else facts.calls).append(call)
        # Atomics write through their first argument.
        if not is_method and name in ATOMICS and args:
            target = args[0]
            if target.type == "pointer_expression" and len(operands(target)):
                target = operands(target)[-1]
            scan.write_targets[target.id] = node.end_byte
            scan.compound_targets.add(target.id)


def _add_accesses(facts: FunctionFacts, scan: _Scan) -> None:
    # Only the outermost subscript of a chain is an access (`a[i][j]`, not `a[i]`).
    inner = set()
    for s in scan.subscripts:
        arg = s.child_by_field_name("argument")
        if arg is not None and arg.type == "subscript_expression":
            inner.add(arg.id)
    for s in scan.subscripts:
        if s.id in inner:
            continue
        base, indices = _subscript_chain(s)
        is_write = s.id in scan.write_targets
        is_read = (not is_write) or s.id in scan.compound_targets
        facts.accesses.append(Access(
            node=s, base=facts.key_of(base) if base is not None else None, indices=tuple(indices),
            index_text="][".join(squash(node_text(facts.src, index_expr(i))) for i in indices),
            is_write=is_write, is_read=is_read,
            order=scan.write_targets.get(s.id, s.start_byte),
        ))


def _subscript_chain(node: Node) -> tuple[Node | None, list[Node]]:
    indices = []
    cur = node
    while cur is not None and cur.type == "subscript_expression":
        idx = cur.child_by_field_name("indices")
        if idx is not None:
            indices.append(idx)
        cur = cur.child_by_field_name("argument")
    while cur is not None and cur.type == "parenthesized_expression" and len(operands(cur)) == 1:
        cur = operands(cur)[0]
    indices.reverse()
    return (cur if cur is not None and cur.type == "identifier" else None), indices


def _add_launches(facts: FunctionFacts, scan: _Scan) -> None:
    for call_node, config in scan.launches:
        cfg = tuple(operands(config))
        facts.launches.append(Launch(info=_launch_info(facts, call_node, config, cfg), node=call_node,
                                     config=config, config_args=cfg, stmt=scan.launch_stmts.get(call_node.id)))


def _launch_info(facts: FunctionFacts, call_node: Node, config: Node, cfg: tuple[Node, ...]) -> LaunchInfo:
    """`kernel<<<grid, block, shared, stream>>>(args)` as text, with what the configuration resolves to."""
    src = facts.src
    fn_node = call_node.child_by_field_name("function")
    if fn_node is not None and fn_node.type == "template_function":
        fn_node = fn_node.child_by_field_name("name") or fn_node
    texts = [squash(node_text(src, c)) for c in cfg]
    block_threads = launch_block_threads(facts, cfg[1]) if len(cfg) > 1 else None
    truncations = grid_divisions(facts, cfg[0]) if cfg else ()
    return LaunchInfo(
        kernel=node_text(src, fn_node) if fn_node is not None else "",
        range=facts.cols.range(call_node), config_range=facts.cols.range(config),
        grid=texts[0] if texts else "", block=texts[1] if len(texts) > 1 else "",
        shared_mem=texts[2] if len(texts) > 2 else None, stream=texts[3] if len(texts) > 3 else None,
        block_threads=block_threads, truncations=truncations,
        args=tuple(squash(node_text(src, a)) for a in operands(call_node.child_by_field_name("arguments")))
        if call_node.child_by_field_name("arguments") is not None else (),
    )
