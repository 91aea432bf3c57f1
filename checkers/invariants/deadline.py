"""The checkers' op deadline: an op (of an engine, a policy or an implementation under test)
that outlives :data:`OP_SECONDS` is stopped with :class:`OpHung`, which the checker running it
turns into a finding (spec/invariants.md, Findings: a hang is a finding too)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

from kvmodel.errors import HarnessInterrupt

__all__ = ["HUNG", "OP_SECONDS", "OpHung", "op_deadline"]


#: the longest one op may take under a checker before the run is stopped as hung: far above
#: any op's real cost (milliseconds), so that no slow machine makes this finding, and short
#: enough that a hang in an engine or a policy under test still ends in a report
#: (spec/invariants.md, Findings). None: no deadline
OP_SECONDS: float | None = 300.0
#: the words of a hang finding (a find with them is reported as found, never shrunk: each try
#: of a shrinker would wait out the deadline)
HUNG = "did not finish within"


class OpHung(HarnessInterrupt):
    """Raised in the main thread when an op outlives :data:`OP_SECONDS`: a HarnessInterrupt, so
    that no policy wrapper turns it into the policy's exception; the checker makes it the
    finding. ``in_policy``: the policy's own code was running."""

    def __init__(self, seconds: float, in_policy: bool) -> None:
        super().__init__(seconds)
        self.seconds, self.in_policy = seconds, in_policy


class _Watch:
    """The op deadline, one per process: a daemon thread wakes a few times a deadline and, when
    the op in progress has outlived it, signals the main thread (SIGALRM), whose handler raises
    :class:`OpHung`. An op costs two attribute writes and a clock read -- a SIGALRM timer armed
    per op cost 14 us an op, 13% of a search. Only where it can work: the main thread, with no
    other SIGALRM handler installed (an outer harness's alarm, the fuzzer's, is left alone)."""

    def __init__(self) -> None:
        self.busy = False
        self.serial = 0
        self.fired = -1
        self.fired_at = 0.0
        self.begun = 0.0
        self.who: object = None
        self.installed = False

    def usable(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return False
        if not self.installed:
            if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
                return False
            signal.signal(signal.SIGALRM, _on_alarm)
            threading.Thread(target=self._run, name="kvmodel-op-deadline", daemon=True).start()
            self.installed = True
        return True

    def _run(self) -> None:
        main = threading.main_thread().ident
        while True:
            limit = OP_SECONDS
            tick = 1.0 if limit is None else min(1.0, limit / 4)
            time.sleep(tick)
            now = time.monotonic()
            if (
                limit is not None
                and self.busy
                and now - self.begun > limit
                # once per op -- again only if the op is still running well after the first
                # signal: a handler that fired inside a callback whose exceptions Python
                # swallows (a gc callback's) must not leave the op hung for good
                and (self.fired != self.serial or now - self.fired_at > max(limit, 4 * tick))
                and signal.getsignal(signal.SIGALRM) is _on_alarm
                and main is not None
            ):
                self.fired, self.fired_at = self.serial, now
                signal.pthread_kill(main, signal.SIGALRM)


_WATCH = _Watch()


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    limit = OP_SECONDS
    if not _WATCH.busy or limit is None or time.monotonic() - _WATCH.begun <= limit:
        return  # (the op ended as the signal was sent, and another may have begun)
    mine, f = _own_code(_WATCH.who), frame
    while f is not None and f.f_code not in mine:
        f = f.f_back
    raise OpHung(float(limit), f is not None)


def _own_code(who: object) -> frozenset[object]:
    """The code objects of ``who``'s own methods (its class's, up to kvmodel's base classes)."""
    out: set[object] = set()
    for cls in type(who).__mro__:
        if cls.__module__.startswith("kvmodel.") or cls is object:
            continue
        for v in vars(cls).values():
            fn = getattr(v, "__func__", v)
            if (code := getattr(fn, "__code__", None)) is not None:
                out.add(code)
    return frozenset(out)


@contextlib.contextmanager
def op_deadline(who: object) -> Iterator[None]:
    """Run one op under the deadline (:data:`OP_SECONDS`); :class:`OpHung` if it outlives it,
    telling whether ``who``'s own code (a policy's) was running."""
    if not _WATCH.usable():
        yield
        return
    _WATCH.who, _WATCH.begun = who, time.monotonic()
    _WATCH.serial += 1
    _WATCH.busy = True
    try:
        yield
    finally:
        _WATCH.busy = False
