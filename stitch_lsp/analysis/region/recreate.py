"""What the Task re-creates around a selection: the module's attributes and methods it uses, the ``__init__``
statements that build them, and the file's functions, classes and constants they name."""

from __future__ import annotations

from stitch_lsp.analysis.region.data import Region, SelfNeed
from stitch_lsp.analysis.region.file_facts import init_facts
from stitch_lsp.analysis.region.locate import Selection
from stitch_lsp.analysis.region.module_needs import (InitStatement, class_methods, identifiers, init_statements,
                                                     needed_statements, self_attributes, statement_text)
from stitch_lsp.analysis.region.syntax import identifiers_of

# Attributes every nn.Module has: the Task's Model has them too.
_MODULE_ATTRS = {"training"}


def recreated_needs(sel: Selection, region: Region) -> None:
    """Attributes, methods, ``__init__`` statements, the file's definitions and constants the Task re-creates."""
    chosen, init_params, init_locals = _class_needs(sel, region)
    _file_needs(sel, region, chosen, {p for p, _ in init_params}, init_locals)


def _class_needs(sel: Selection, region: Region
                 ) -> tuple[list[InitStatement], list[tuple[str, str | None]], dict[str, str]]:
    """The module's attributes and methods the selection uses, and the ``__init__`` statements that build them;
    returns those statements, ``__init__``'s parameters and its ``name = expr`` locals."""
    src = sel.src
    used = [a for s in sel.statements for a in self_attributes(s, src)]
    used = [a for i, a in enumerate(used) if a not in used[:i] and a not in _MODULE_ATTRS]
    init_needs, init_params, init_locals = init_facts(sel.cls, src) if sel.cls is not None else ({}, [], {})
    region.init_params = init_params
    methods = class_methods(sel.cls, src, sel.lines) if sel.cls is not None else {}
    # Methods of the class the selection calls (``self._norm(x)``), and what they use in turn.
    attrs: list[str] = []
    pending = list(used)
    while pending:
        name = pending.pop(0)
        if name in attrs or name in region.methods or name in _MODULE_ATTRS:
            continue
        if name in methods and name not in init_needs and name != region.function:
            node = methods[name]
            region.methods[name] = statement_text(sel.lines, src, node)
            pending += self_attributes(node, src)
        else:
            attrs.append(name)
    init = next((m for n, m in methods.items() if n == "__init__"), None)
    init_fn = (init.child_by_field_name("definition") if init is not None and init.type == "decorated_definition" else init)
    stmts = init_statements(init_fn, sel.lines, src) if init_fn is not None else []
    chosen, unbuilt = needed_statements(stmts, set(attrs))
    for name in attrs:
        need = init_needs.get(name)
        region.self_needs.append(need if need is not None else SelfNeed(name, "unknown"))
    sel.unknown_self = [a for a in attrs if a in unbuilt and a not in methods]
    sel.unknown_self += [a for a in unbuilt - set(attrs) if a not in methods and a not in _MODULE_ATTRS
                         and a not in sel.unknown_self]
    region.init_statements = {s.line: s.text for s in chosen}
    return chosen, init_params, init_locals


def _file_needs(sel: Selection, region: Region, chosen: list[InitStatement], param_names: set[str],
                init_locals: dict[str, str]) -> None:
    """Names the re-created code reads: the file's constants, functions and classes, transitively."""
    src = sel.src
    local_names = set().union(*(s.binds_local for s in chosen)) if chosen else set()
    words: set[str] = set()
    for s in sel.statements:
        words |= identifiers(s, src)
    for s in chosen:
        words |= s.names - local_names - param_names
    for text in region.methods.values():
        words |= identifiers_of(text)
    wanted_consts: set[str] = set(region.module_names)
    wanted_defs: set[str] = set()
    pending_words = list(words)
    while pending_words:
        word = pending_words.pop()
        if word in sel.definitions and word not in wanted_defs and word != region.class_name:
            wanted_defs.add(word)
            pending_words += list(identifiers_of(sel.definitions[word][1]))
        elif word in sel.constants and word not in wanted_consts and word not in param_names:
            wanted_consts.add(word)
            pending_words += list(identifiers_of(sel.constants[word]))
    region.helpers = {name: text for name, (line, text) in sorted(sel.definitions.items(), key=lambda kv: kv[1][0])
                      if name in wanted_defs}
    # In file order: a constant may be defined from an earlier one.
    region.module_names = {k: v for k, v in sel.constants.items() if k in wanted_consts}
    region.init_locals = {k: v for k, v in init_locals.items()
                          if any(k in s.binds_local for s in chosen) and k not in param_names}

