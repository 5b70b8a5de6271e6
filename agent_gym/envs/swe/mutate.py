"""Seeded bug candidates by syntax-tree mutation of Python source.

:func:`mutations` lists every candidate of one file, each a small local edit that keeps the file
valid Python, found on the syntax tree and written back into the original text (only the edited
expression or statement changes; the rest of the file keeps its formatting):

* ``swap_operands``: ``a - b`` -> ``b - a`` (non-commutative operators), ``a < b`` -> ``b < a``;
* ``change_operator``: ``+``/``-``, ``*``/``//``, ``<``/``<=``, ``==``/``!=``, ``in``/``not in``,
  ``and``/``or``, ...;
* ``change_constant``: an integer ``n`` -> ``n + 1`` or ``n - 1``, ``True``/``False``;
* ``invert_condition``: the test of an ``if``, ``while``, ``elif`` or conditional expression negated;
* ``remove_statement``: an assignment, call, ``continue``/``break`` or ``raise`` replaced by ``pass``;
* ``remove_branch`` / ``remove_loop`` / ``remove_return``: an ``if`` without ``else``, a loop or a
  ``return`` replaced by ``pass``;
* ``remove_negation``: ``not x`` -> ``x``, ``-x`` -> ``x``.

Docstrings, ``import`` lines and definitions are never touched. Which candidates become tasks is
decided by running the tests (:mod:`agent_gym.envs.swe.generate`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["KINDS", "Mutation", "apply_mutation", "mutations"]

KINDS = ("swap_operands", "change_operator", "change_constant", "invert_condition", "remove_statement",
         "remove_branch", "remove_loop", "remove_return", "remove_negation")
"""The kinds of mutation (see the module docstring)."""

_BIN_SWAP: dict[type, type] = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
                               ast.Div: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_CMP_SWAP: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                               ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot,
                               ast.IsNot: ast.Is}
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


@dataclass(frozen=True)
class Mutation:
    """One candidate edit of a file.

    Attributes:
        kind: One of :data:`KINDS`.
        line: The first line edited (1-based).
        start / end: Character offsets of the replaced text in the original source.
        replacement: The new text.
        description: What changed, for people (never shown to the agent).
    """

    kind: str
    line: int
    start: int
    end: int
    replacement: str
    description: str


def apply_mutation(source: str, mutation: Mutation) -> str:
    """The source with the mutation applied."""
    return source[:mutation.start] + mutation.replacement + source[mutation.end:]


class _Offsets:
    """Character offsets from the syntax tree's (line, UTF-8 byte column) positions."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, byte_col: int) -> int:
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _segment(node: ast.AST) -> tuple[int, int, int, int] | None:
    end_line = getattr(node, "end_lineno", None)
    end_col = getattr(node, "end_col_offset", None)
    if end_line is None or end_col is None:
        return None
    return node.lineno, node.col_offset, end_line, end_col  # type: ignore[attr-defined]


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def mutations(source: str) -> list[Mutation]:
    """Every mutation candidate of ``source`` (see the module docstring), in source order.

    Raises:
        SyntaxError: When ``source`` is not valid Python.
    """
    tree = ast.parse(source)
    offsets = _Offsets(source)
    found: list[Mutation] = []
    seen: set[tuple[int, int, str]] = set()

    def add(kind: str, node: ast.AST, replacement: str, description: str, whole_lines: bool = False) -> None:
        seg = _segment(node)
        if seg is None:
            return
        line, col, end_line, end_col = seg
        if whole_lines:
            start = offsets.starts[line - 1]
            end = offsets.starts[end_line]
            indent = offsets.lines[line - 1][: len(offsets.lines[line - 1]) - len(offsets.lines[line - 1].lstrip())]
            tail = offsets.lines[end_line - 1][offsets.offset(end_line, end_col) - offsets.starts[end_line - 1]:]
            head = offsets.lines[line - 1][: offsets.offset(line, col) - start]
            if head.strip() or tail.strip():
                return  # not alone on its lines
            newline = "\n" if offsets.lines[end_line - 1].endswith("\n") else ""
            replacement = f"{indent}{replacement}{newline}"
        else:
            if line != end_line:
                return  # keep expression edits on one line
            start, end = offsets.offset(line, col), offsets.offset(end_line, end_col)
        key = (start, end, replacement)
        if key in seen or source[start:end] == replacement:
            return
        seen.add(key)
        found.append(Mutation(kind, line, start, end, replacement, description))

    def text(node: ast.AST) -> str:
        return ast.get_source_segment(source, node) or ast.unparse(node)

    for node in _walk(tree):
        if isinstance(node, ast.BinOp):
            op = type(node.op)
            if op in _BIN_SWAP:
                new = ast.BinOp(left=node.left, op=_BIN_SWAP[op](), right=node.right)
                add("change_operator", node, ast.unparse(new), f"operator {op.__name__} -> {_BIN_SWAP[op].__name__}")
            if isinstance(node.op, _NON_COMMUTATIVE):
                new = ast.BinOp(left=node.right, op=node.op, right=node.left)
                add("swap_operands", node, ast.unparse(new), f"operands of {op.__name__} swapped")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1:
            cmp = type(node.ops[0])
            if cmp in _CMP_SWAP:
                new_cmp = ast.Compare(left=node.left, ops=[_CMP_SWAP[cmp]()], comparators=node.comparators)
                add("change_operator", node, ast.unparse(new_cmp),
                    f"comparison {cmp.__name__} -> {_CMP_SWAP[cmp].__name__}")
            if cmp in (ast.Lt, ast.LtE, ast.Gt, ast.GtE):
                new_cmp = ast.Compare(left=node.comparators[0], ops=node.ops, comparators=[node.left])
                add("swap_operands", node, ast.unparse(new_cmp), "operands of the comparison swapped")
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            add("change_operator", node, ast.unparse(ast.BoolOp(op=other, values=node.values)),
                f"boolean {type(node.op).__name__} -> {type(other).__name__}")
        elif isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool):
                add("change_constant", node, repr(not value), f"constant {value} -> {not value}")
            elif isinstance(value, int):
                for new_value in (value + 1, value - 1):
                    if new_value >= 0 or value < 0:
                        add("change_constant", node, repr(new_value), f"constant {value} -> {new_value}")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            add("remove_negation", node, text(node.operand), f"{type(node.op).__name__} removed")
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            add("invert_condition", node.test, f"not ({text(node.test)})", "condition inverted")
        if isinstance(node, ast.stmt) and not _is_docstring(node):
            if isinstance(node, ast.If) and not node.orelse:
                add("remove_branch", node, "pass", "if block removed", whole_lines=True)
            elif isinstance(node, (ast.For, ast.While)):
                add("remove_loop", node, "pass", "loop removed", whole_lines=True)
            elif isinstance(node, ast.Return) and node.value is not None:
                add("remove_return", node, "pass", "return removed", whole_lines=True)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Continue, ast.Break,
                                   ast.Raise)):
                add("remove_statement", node, "pass", f"{type(node).__name__} statement removed", whole_lines=True)
    return found


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node in source order, skipping imports, decorators, annotations and default values."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.JoinedStr)):
            continue
        yield node
        children: list[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            children = list(node.body)
        elif isinstance(node, ast.ClassDef):
            children = list(node.body)
        else:
            children = list(ast.iter_child_nodes(node))
        stack.extend(reversed(children))
