"""The kvmodel exception tree (STYLE §6).

Three things are kept apart:

* user misuse (a bad trace, a bad config, an unknown policy) -- ``TraceError``, ``ConfigError``,
  ``PolicyNotFoundError``; each mixes in the built-in a caller would expect (``ValueError``,
  ``LookupError``);
* a policy returning a decision the protocol does not allow -- ``PolicyError``;
* a broken internal invariant, i.e. a bug in kvmodel -- ``InternalError``.

A *counterexample* is a result, not an error: checkers return it and never raise it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "HarnessInterrupt",
    "IllegalTransitionError",
    "InternalError",
    "KVModelError",
    "PolicyDefinitionError",
    "PolicyError",
    "PolicyNotFoundError",
    "TraceError",
    "is_interrupt",
    "policy_raised",
]


class KVModelError(Exception):
    """Root of every exception kvmodel raises on purpose."""


class TraceError(KVModelError, ValueError):
    """A trace line that cannot be accepted.

    The message names the file, the line (1-based), the op and the field, says what was expected
    and shows what was found, e.g.::

        trace.jsonl:7: op 'remove', field 'index': expected an index in [0, 3) (got 5)
    """

    def __init__(
        self,
        problem: str,
        *,
        file: str | None = None,
        line: int | None = None,
        op: str | None = None,
        field: str | None = None,
    ) -> None:
        self.problem = problem
        self.file = file
        self.line = line
        self.op = op
        self.field = field
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"{self.file or '<trace>'}:{self.line}")
        elif self.file is not None:
            where.append(self.file)
        what = []
        if self.op is not None:
            what.append(f"op {self.op!r}")
        if self.field is not None:
            what.append(f"field {self.field!r}")
        head = ": ".join(p for p in (" ".join(where), ", ".join(what)) if p)
        return f"{head}: {self.problem}" if head else self.problem

    def located(self, *, file: str | None, line: int | None, op: str | None) -> TraceError:
        """The same error with its location filled in (fields already set are kept)."""
        return TraceError(
            self.problem,
            file=self.file if self.file is not None else file,
            line=self.line if self.line is not None else line,
            op=self.op if self.op is not None else op,
            field=self.field,
        )


class IllegalTransitionError(TraceError):
    """An event the lifecycle transition table (spec L3) has no row for.

    It is a ``TraceError`` because, in a validated trace, only the trace can ask for one; the
    message names the state, the event, the message and the context.
    """

    def __init__(self, state: str, event: str, message: str, context: str) -> None:
        self.state = state
        self.event = event
        self.message_id = message
        self.context = context
        super().__init__(
            f"illegal lifecycle transition: message {message!r} of context {context!r} is "
            f"{state} and the transition table has no row for event {event}"
        )


class ConfigError(KVModelError, ValueError):
    """A configuration (TOML file or keyword) that cannot be accepted."""


class PolicyNotFoundError(KVModelError, LookupError):
    """A policy name or ``module:Name`` path that does not resolve."""


class PolicyDefinitionError(KVModelError, TypeError):
    """A policy class whose declarations contradict its code, refused when the class is defined
    (e.g. a declared reclaim rule beside a hand-written ``on_op``; spec/policies.md §Declared
    reclaim)."""


class PolicyError(KVModelError, RuntimeError):
    """A policy returned a decision the policy protocol does not allow (spec PP1).

    ``kind`` says which rule: ``evict-in-flight``, ``evict-pinned``, ``non-candidate``,
    ``duplicate``, ``bad-placement``, ``bad-free`` or ``raised`` (the policy's own code raised an
    exception; see :func:`policy_raised`). The reference engine refuses such a decision rather
    than carrying it out; checkers report it as a violation of the invariant it would have broken
    (no-eviction-in-flight, pinned-never-evicted, accounting for a double free) or as
    ``policy-protocol``.
    """

    def __init__(self, message: str, *, kind: str = "protocol") -> None:
        self.kind = kind
        super().__init__(message)


class HarnessInterrupt(BaseException):
    """A deliberate stop from the harness around a run (a fuzzer's alarm, a hang deadline): a
    ``BaseException`` that no ``except Exception`` swallows, and that the checkers let through
    where they turn everything else a policy or an engine raises into a finding."""


def is_interrupt(err: BaseException) -> bool:
    """Whether ``err`` stops the checker itself rather than being a finding: Ctrl-C
    (``KeyboardInterrupt``) and the harness's own :class:`HarnessInterrupt`. Anything else a
    policy or an engine under test raises -- ``SystemExit`` and other ``BaseException`` subclasses
    included -- is its fault, reported like any exception (spec/invariants.md, Findings)."""
    return isinstance(err, KeyboardInterrupt | HarnessInterrupt)


def policy_raised(policy: str, call: str, err: BaseException) -> PolicyError:
    """The :class:`PolicyError` for an exception raised inside a policy's ``call`` (its own
    code, not the engine's): a finding about the policy, never an engine crash. ``err`` may be
    any ``BaseException`` but an interrupt (:func:`is_interrupt`): a policy that calls
    ``sys.exit`` has not passed."""
    return PolicyError(
        f"policy {policy!r} raised {type(err).__name__} in {call}: {err}", kind="raised"
    )


class InternalError(KVModelError, AssertionError):
    """A kvmodel invariant broke: this is a bug in kvmodel, please report it with the trace."""
