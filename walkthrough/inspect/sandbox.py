"""A Jinja sandbox for untrusted templates: no Python internals, no files, bounded time and size.

Chat templates come from model files, so they are treated as hostile code.
`BoundedSandbox` is jinja2's `ImmutableSandboxedEnvironment` with four more guards:

- Python internals: reaching an attribute the sandbox hides (`cycler.__init__`,
  `''.__class__`, `messages.append`) raises `TemplateError` at once, instead of
  jinja's silent empty value.
- Files: `{% include %}`, `{% import %}` and `{% extends %}` raise `TemplateError`.
- Time: while a template runs, a trace function (`sys.settrace`, this thread only)
  sees every line of the compiled template code and every Python call it makes, and
  stops the render once the deadline passes or `cancel` is set. So
  `{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}`
  stops too, although it makes no call inside the inner loop.
- Size: the output is counted as it is produced; values that grow (`*`, `+`, `%`,
  `~`, `{% set %}` blocks, filter and call results, values read back from a
  `namespace`) are measured, and numbers or strings that would make one operation
  allocate more than the limit (`'a' * 10**10`, `'x'|center(10**10)`,
  `s|replace('a', big)`) are refused before the operation runs.

Compile-time constant folding runs no filter and no operator (they are left to
the render, where the limits apply).

Not handled here: a single C-level operation the checks do not know about can
still allocate up to what its arguments ask for, or run for as long as it takes,
before its result is measured; `walkthrough.inspect.render_process` runs renders
in a helper process that is killed for that.

Example:
    >>> env = BoundedSandbox()
    >>> run(compile_source(env, "{{ 'ab' * 2 }}"), {})
    'abab'
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import update_wrapper
from typing import Any

import jinja2
import jinja2.ext
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, is_internal_attribute

from walkthrough.errors import WalkthroughError
from walkthrough.textsafe import visible

MAX_SOURCE_CHARS = 1_000_000  # real chat templates are under 20 kB
MAX_INT_BITS = 1 << 16  # integers computed by `*` and `**` stay below 2**65536
TEMPLATE_FILENAME = "<template>"  # jinja's code filename for templates compiled from a string
_DIGIT_RUN = re.compile(r"\d+")


class TemplateError(WalkthroughError):
    """A chat template failed, refused the messages, or broke a sandbox rule."""


@dataclass(frozen=True)
class Limits:
    """How long a render may run, how much text any value or the output may hold, and the
    address space of the process it runs in (see `walkthrough.inspect.render_process`)."""

    seconds: float = 1.5
    max_chars: int = 16 * 1024 * 1024
    memory_bytes: int = 1 << 30


DEFAULT_LIMITS = Limits()


class _Stop(BaseException):
    """Raised inside the template to end it; a BaseException so no `except Exception` swallows it."""


class _Budget:
    """The running render's deadline, cancel flag and size limit; `stop` ends the render."""

    def __init__(self, limits: Limits, cancel: threading.Event | None):
        self.limits = limits
        self.cancel = cancel
        self.deadline = time.monotonic() + limits.seconds
        self.stopped: str | None = None

    def stop(self, reason: str) -> None:
        self.stopped = self.stopped or reason
        raise _Stop(self.stopped)

    def check(self) -> None:
        if self.stopped is not None:
            raise _Stop(self.stopped)
        if self.cancel is not None and self.cancel.is_set():
            self.stop("rendering was cancelled")
        if time.monotonic() > self.deadline:
            self.stop(
                f"ran longer than {self.limits.seconds:g} s and was stopped (a loop that does not end?)"
            )

    def number(self, n: int, what: str) -> None:
        if abs(n) > self.limits.max_chars:
            self.stop(
                f"passed the number {n:,} to {what}; numbers above {self.limits.max_chars:,} are refused"
            )

    def allow(self, estimate: int, what: str) -> None:
        """Stop before an operation whose result would exceed the size limit."""
        if estimate > self.limits.max_chars:
            self.stop(
                f"asked {what} for about {estimate:,} characters; the limit is {self.limits.max_chars:,}"
            )

    def size(self, value: Any, what: str) -> Any:
        """`value` unchanged, or a stop if it is a string or collection over the size limit."""
        if type(value) in _SIZED and len(value) > self.limits.max_chars:
            unit = "characters" if isinstance(value, str) else "items"
            self.stop(
                f"built {what} of {len(value):,} {unit}; the limit is {self.limits.max_chars:,}"
            )
        return value


def _numbers_in(args: Iterable[Any]) -> list[int]:
    found = []
    for a in args:
        if isinstance(a, (tuple, list)) and len(a) <= 64:
            found.extend(x for x in a if isinstance(x, int) and not isinstance(x, bool))
        elif isinstance(a, int) and not isinstance(a, bool):
            found.append(a)
    return found


def _materialized(value: Any) -> Any:
    """Iterators (from `map`, `select`, ...) as lists, so a join can be measured before it runs."""
    if isinstance(value, (str, bytes, list, tuple, dict)) or not hasattr(value, "__iter__"):
        return value
    return list(value)


def _estimate(name: str, value: Any, args: tuple, kwargs: dict) -> int:
    """An upper bound on the size of `value.NAME(*args)` for the operations that multiply sizes.

    Example: _estimate("replace", "aaa", ("a", "bb"), {}) -> 3 + 3 * 1 = 6
    """
    if name == "replace" and isinstance(value, str) and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        count = value.count(old) if old else len(value) + 1
        return len(value) + count * max(0, len(new) - len(old))
    if name == "join":
        if isinstance(value, str):
            items, sep = (args[0] if args else ()), value
        else:
            items, sep = value, (args[0] if args else kwargs.get("d", ""))
        if isinstance(items, (list, tuple)) and isinstance(sep, str):
            return len(items) * len(sep) + sum(len(x) for x in items if isinstance(x, str))
    if name == "indent" and isinstance(value, str):
        width = args[0] if args else kwargs.get("width", 4)
        pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
        return len(value) + (value.count("\n") + 2) * pad
    return 0


_CALLABLE_NAMES = {"safe_range": "range", "generate_lorem_ipsum": "lipsum"}


def _callable_name(obj: Any) -> str:
    name = (
        getattr(obj, "name", None)
        if type(obj).__name__ == "Macro"
        else getattr(obj, "__name__", None)
    )
    name = name or type(obj).__name__
    return f"{_CALLABLE_NAMES.get(name, name)}()"


_SIZED = (str, list, tuple, dict)


class _PerThread(threading.local):
    budget: _Budget | None = None


class _CheckedConcat(CodeGenerator):
    """Jinja's code generator with every `~` concatenation measured."""

    def visit_Concat(self, node, frame) -> None:
        self.write("environment.checked_concat(")
        super().visit_Concat(node, frame)
        self.write(")")


class _NoFiles(jinja2.BaseLoader):
    def get_source(self, environment, template):
        raise TemplateError(
            f"template tried to load the file {template!r}; templates may not read files"
        )


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable jinja sandbox with the internals, file, time and size guards described above."""

    intercepted_binops = frozenset({"+", "*", "**", "%"})
    code_generator_class = _CheckedConcat

    def __init__(self, **options: Any):
        options.setdefault("loader", _NoFiles())
        super().__init__(**options)
        self._local = _PerThread()
        self.filters = {name: self._bounded_filter(name, f) for name, f in self.filters.items()}

    # ---- the budget of the render running on this thread ----------------------
    @property
    def budget(self) -> _Budget | None:
        """The budget of the render running on this thread (None between renders)."""
        return self._local.budget

    def _check_args(self, what: str, args: tuple, kwargs: dict) -> None:
        budget = self._local.budget
        numbers = _numbers_in((*args, *kwargs.values()))
        if budget is None:
            # Compile-time constant folding: jinja turns this error into "evaluate at run time".
            if any(abs(n) > DEFAULT_LIMITS.max_chars for n in numbers):
                raise TemplateError("large number in a constant expression")
            return
        for n in numbers:
            budget.number(n, what)
        for a in (*args, *kwargs.values()):
            budget.size(a, f"an argument to {what}")

    def set_filter(self, name: str, func: Callable) -> None:
        """Add or replace a filter; it runs under the same argument and size checks as jinja's own."""
        self.filters[name] = self._bounded_filter(name, func)

    def _bounded_filter(self, name: str, func: Callable) -> Callable:
        what = f"the filter {name!r}"
        # Filters marked pass_context/pass_environment/pass_eval_context get that first.
        lead = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0
        local = self._local

        def bounded(*args: Any, **kwargs: Any) -> Any:
            budget = local.budget
            if budget is None:  # constant folding at compile time: jinja evaluates it at run time instead
                raise TemplateError(f"{what} called outside a render")
            if name == "format" and len(args) > lead and isinstance(args[lead], str):
                self._format_widths(args[lead], what)
            if len(args) > lead + 1 or kwargs:  # the value alone cannot ask for more room
                if name == "join":
                    args = (*args[:lead], _materialized(args[lead]), *args[lead + 1 :])
                self._check_args(what, args[lead + 1 :], kwargs)
                budget.allow(_estimate(name, args[lead], args[lead + 1 :], kwargs), what)
            result = func(*args, **kwargs)
            if type(result) in _SIZED and len(result) > budget.limits.max_chars:
                budget.size(result, f"the result of {what}")
            return result

        return update_wrapper(bounded, func)

    # ---- hooks the compiled template calls --------------------------------------
    def call(self, context, obj, /, *args, **kwargs):
        budget = self._local.budget
        what = _callable_name(obj)
        owner = getattr(obj, "__self__", None)
        if budget is not None:
            budget.check()  # also here, in case something replaced the trace function
            if isinstance(owner, str) and obj.__name__ == "join" and args:
                args = (_materialized(args[0]), *args[1:])
        self._check_args(what, args, kwargs)
        if budget is not None and isinstance(owner, str):
            budget.allow(_estimate(obj.__name__, owner, args, kwargs), what)
        result = super().call(context, obj, *args, **kwargs)
        return result if budget is None else budget.size(result, f"the result of {what}")

    def getattr(self, obj: Any, attribute: str) -> Any:
        value = super().getattr(obj, attribute)
        budget = self._local.budget
        return value if budget is None else budget.size(value, f"a value (.{attribute})")

    def getitem(self, obj: Any, argument: Any) -> Any:
        value = super().getitem(obj, argument)
        budget = self._local.budget
        return value if budget is None else budget.size(value, "a value ([...])")

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        budget = self.budget
        if budget is None:  # constant folding at compile time: jinja evaluates it at run time
            raise TemplateError("operator evaluated outside a render")
        budget.check()
        what = f"{operator!r}"
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    budget.allow(len(seq) * max(n, 0), what)
            if isinstance(left, int) and isinstance(right, int):
                self._int_bits(left.bit_length() + right.bit_length(), what)
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
            self._int_bits(max(left.bit_length() - 1, 0) * right, what)
        elif operator == "%" and isinstance(left, str):
            self._format_widths(left, "'%' formatting")
            for n in _numbers_in(right if isinstance(right, tuple) else (right,)):
                budget.number(n, "'%' formatting")
        return budget.size(self.binop_table[operator](left, right), f"the result of {what}")

    def _int_bits(self, bits: int, what: str) -> None:
        if bits > MAX_INT_BITS:
            self.budget.stop(
                f"asked {what} for an integer of about {bits:,} bits; the limit is {MAX_INT_BITS:,}"
            )

    def _format_widths(self, fmt: str, what: str) -> None:
        for run in _DIGIT_RUN.findall(fmt):
            self.budget.number(
                int(run) if len(run) < 19 else 10**18, f"{what} (a width in the format)"
            )

    def wrap_str_format(self, value: Any):
        fmt = super().wrap_str_format(value)
        if fmt is not None and self.budget is not None:
            self._format_widths(value.__self__, "str.format")
        return fmt

    def checked_concat(self, value: Any) -> Any:
        budget = self.budget
        return value if budget is None else budget.size(value, "a string with '~'")

    def concat(self, parts: Iterable[str]) -> str:  # type: ignore[override] (used for {% set %} blocks, macros)
        text = "".join(parts)
        budget = self.budget
        return text if budget is None else budget.size(text, "a block of text")

    def unsafe_undefined(self, obj: Any, attribute: str):
        kind = type(obj).__name__
        if attribute.startswith("_") or is_internal_attribute(obj, attribute):
            raise TemplateError(
                f"template tried to access {attribute!r} of a {kind!r} object; Python internals are off limits"
            )
        raise TemplateError(
            f"template tried to use {attribute!r} on a {kind!r} object; templates may not change their inputs"
        )


def compile_source(env: BoundedSandbox, source: str, origin: str = "template") -> jinja2.Template:
    """Parse template source in the sandbox `env`.

    Raises:
        TemplateError: the source is too large or not valid Jinja (with its line number).
    """
    if len(source) > MAX_SOURCE_CHARS:
        raise TemplateError(
            f"{origin} is {len(source):,} characters long; the limit is {MAX_SOURCE_CHARS:,}"
        )
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"{origin} line {exc.lineno}: {visible(exc.message or '')}; fix the template's syntax"
        ) from None
    except (RecursionError, SyntaxError, MemoryError):
        # Python's compiler refuses 21 nested loops ("too many statically nested blocks") or 100 nested ifs.
        raise TemplateError(f"{origin} is nested too deeply to compile; simplify the template") from None


def _template_line(tb) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == TEMPLATE_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def run(
    template: jinja2.Template,
    variables: dict[str, Any],
    *,
    limits: Limits = DEFAULT_LIMITS,
    cancel: threading.Event | None = None,
    origin: str = "template",
) -> str:
    """Render `template` with `variables` under the sandbox's time and size limits.

    Args:
        cancel: set it from another thread to stop the render (it stops within one template line).
        origin: how error messages name the template ("chat template of model.gguf").

    Raises:
        TemplateError: the template raised, broke a rule, or ran out of time or room.
    """
    env = template.environment
    if not isinstance(env, BoundedSandbox):
        raise TypeError("run() renders templates compiled in a BoundedSandbox")
    budget = _Budget(limits, cancel)

    # Once stopped, the trace functions stand down (the stop is already on its way up).
    def trace_line(frame, event, arg):
        if budget.stopped is None:
            budget.check()
            return trace_line
        return None

    def trace_call(frame, event, arg):
        if budget.stopped is not None:
            return None
        budget.check()
        return trace_line if frame.f_code.co_filename == TEMPLATE_FILENAME else None

    previous_trace = sys.gettrace()
    env._local.budget = budget
    parts: list[str] = []
    produced = 0
    sys.settrace(trace_call)
    try:
        for chunk in template.generate(**variables):
            produced += len(chunk)
            if produced > limits.max_chars:
                budget.stop(
                    f"produced more than {limits.max_chars:,} characters of output and was stopped"
                )
            parts.append(chunk)
        budget.check()
    except _Stop as stop:
        raise TemplateError(f"{origin} {stop}") from None
    except TemplateError as exc:
        raise TemplateError(f"{origin}: {exc}") from None
    except RecursionError:
        raise TemplateError(f"{origin} recursed too deeply (a macro calling itself?)") from None
    except MemoryError:
        raise TemplateError(f"{origin} ran out of memory") from None
    except jinja2.TemplateError as exc:
        # raise_exception() in the template, an undefined value used, a bad filter call.
        line = _template_line(exc.__traceback__)
        where = f" line {line}" if line else ""
        raise TemplateError(
            f"{origin}{where}: {visible(exc.message or type(exc).__name__)}"
        ) from None
    except Exception as exc:  # noqa: BLE001 (any error inside untrusted code is the template's fault)
        line = _template_line(exc.__traceback__)
        where = f" line {line}" if line else ""
        raise TemplateError(
            f"{origin}{where} failed: {type(exc).__name__}: {visible(str(exc))}"
        ) from None
    finally:
        sys.settrace(previous_trace)
        env._local.budget = None
    if budget.stopped is not None:  # stopped, but something inside swallowed it
        raise TemplateError(f"{origin} {budget.stopped}")
    return "".join(parts)
