"""``and`` / ``or`` / ``not`` in interpreted Triton kernels, with the compiled semantics.

Compiled Triton (``CodeGenerator.visit_BoolOp``, ``visit_UnaryOp``, triton 3.9) evaluates
``a and b`` / ``a or b`` / ``not a`` on tensors *elementwise*: every tensor operand is reinterpreted
as ``int1`` (nonzero) and combined with ``logical_and`` / ``logical_or`` / ``not_``. Only compile-time
values (Python scalars, ``constexpr``) short-circuit: a false one ends an ``and`` (a true one an ``or``)
and is its value, any other one drops out. Triton's interpreter runs the kernel as Python, where a
block tensor is always true (its ``__bool__`` hack): ``mask_a and mask_b`` silently returns
``mask_b``, ``not mask`` returns False.

:class:`LogicalTransformer` rewrites the kernel's source before the interpreter executes it:

    a and b and c   ->  _triton_bool_op("logical_and", lambda: a, lambda: b, lambda: c)
    a or b          ->  _triton_bool_op("logical_or", lambda: a, lambda: b)
    not a           ->  _triton_not(a)

The operands stay lazy, so compile-time short-circuiting still skips what follows, as compiled (an
operand with an assignment expression is evaluated in place, so its name binds in the kernel).
What cannot be rewritten (a kernel without source) and every other Python truth test of a block
tensor (``if mask:``, ``x if mask else y``) meets :func:`strict_bool`: a one-line
:class:`LogicOnBlockTensor` naming the file and line, never a silent answer.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from pathlib import Path

import triton
import triton.language as tl
from triton.runtime import interpreter


class LogicOnBlockTensor(TypeError):
    """Python truthiness asked of a block tensor inside an interpreted kernel (compiled Triton has none)."""


def _is_dynamic(value: object) -> bool:
    """A run-time value (compiled: an IR value), as opposed to a compile-time one that short-circuits."""
    return isinstance(value, tl.tensor)


def _triton_bool_op(method: str, *operands: Callable[[], object]) -> object:
    """``and``/``or`` as ``CodeGenerator._apply_boolean_values``: constants short-circuit, tensors combine."""
    dynamic: list[tl.tensor] = []
    value = None
    for operand in operands:
        value = operand()
        if not _is_dynamic(value):
            if bool(value) is (method == "logical_or"):
                return value
            continue
        dynamic.append(value)
    if not dynamic:
        return value
    while len(dynamic) >= 2:
        rhs, lhs = dynamic.pop(), dynamic.pop()
        dynamic.append(getattr(lhs, method)(rhs))
    return dynamic[0]


def _triton_not(value: object) -> object:
    return value.__not__() if _is_dynamic(value) else not value


def _thunk(node: ast.expr) -> ast.Lambda:
    """``lambda: node``; an operand that assigns (``(m := x > 0)``) is evaluated at once, as ``lambda v=node: v``,
    so that its name is bound in the kernel's scope, not the lambda's."""
    if not any(isinstance(sub, ast.NamedExpr) for sub in ast.walk(node)):
        return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                          body=node)
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(arg="_value")], kwonlyargs=[], kw_defaults=[],
                              defaults=[node])
    return ast.Lambda(args=arguments, body=ast.Name(id="_value", ctx=ast.Load()))


class LogicalTransformer(interpreter.ASTTransformer):
    """The interpreter's own source rewrite (comparison chains, assignments) plus ``and``/``or``/``not``."""

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        node = self.generic_visit(node)
        method = "logical_and" if isinstance(node.op, ast.And) else "logical_or"
        call = ast.Call(func=ast.Name(id="_triton_bool_op", ctx=ast.Load()),
                        args=[ast.Constant(value=method), *[_thunk(value) for value in node.values]], keywords=[])
        return ast.copy_location(call, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        node = self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        call = ast.Call(func=ast.Name(id="_triton_not", ctx=ast.Load()), args=[node.operand], keywords=[])
        return ast.copy_location(call, node)


_TRITON_DIR = str(Path(triton.__file__).parent)


def strict_bool(tensor: tl.tensor) -> bool:
    """``tl.tensor.__bool__`` under the interpreter: a scalar's value; a block of several values is an error
    when a kernel asks (Triton's own code tests ``if other`` for "given": that keeps the interpreter's True)."""
    data = tensor.handle.data
    if data.size == 1:
        return bool(data)
    caller = sys._getframe(1)
    if caller.f_code.co_filename.startswith(_TRITON_DIR):
        return True
    raise LogicOnBlockTensor(
        f"{caller.f_code.co_filename}:{caller.f_lineno}: the truth value of a block tensor of shape "
        f"{list(data.shape)} was asked (Python 'if'/'and'/'or'/'not' on a mask); compiled Triton has no such value: "
        "use '&', '|', '~' or tl.where")


#: Names the rewritten source refers to; the interpreter copies its module globals into the kernel's.
HELPERS = {"_triton_bool_op": _triton_bool_op, "_triton_not": _triton_not}
