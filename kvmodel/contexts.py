"""Contexts: the logical message sequence, per-message lifecycle, and the materialized chain.

A context keeps two views of itself (spec P3, deferred application):

* the **logical** sequence -- what the harness will send next; edits change it at once;
* the **materialized** chain -- the full blocks whose KV currently represents a prefix of it; it
  changes only at the context's next ``infer`` (or at close). ``valid`` counts the leading entries
  of the chain that are still a prefix of the logical sequence; an edit at token offset ``o`` sets
  ``valid = min(valid, o // block_size)`` (suffix invalidation, spec B5).

Lifecycle states are stored sparsely: a live message that is neither pinned nor temporary takes the
context's *phase* (Active while runnable or running, Suspended while waiting). Phase events (RUN,
INFER_START, INFER_END) therefore cost O(1) instead of O(context length); the transition table is
applied to the phase and, message by message, to the explicitly stored states (spec L4).

A fork shares its source's sequence instead of copying it (spec P5, cost): both become *views*
of one append-only :class:`_Log`, each a prefix of it. A view that reaches the log's end appends
in place; any other change, or a read of a view the log has grown past, first copies the view
into the context's own lists (:meth:`Context._own`). A chain of forks, each context forked from
the last and given a message, therefore costs O(1) per fork and O(messages) memory in all, where
copying at every fork cost O(depth) each and O(depth^2) memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from kvmodel.blocks import ROOT_KEY, BlockSpec, pack
from kvmodel.copies import PackedRefs
from kvmodel.errors import InternalError, TraceError
from kvmodel.ids import BlockKey, ContextId, MessageId, SessionId
from kvmodel.io.trace import MAX_CONTEXT_TOKENS
from kvmodel.lifecycle import BlockClass, Event, MsgState, aggregate_within_context, transition
from kvmodel.messages import AgentKind, Message, MessageKind, SpawnRecord

__all__ = ["Context"]


class _Log:
    """The message sequence some contexts share (see the module docstring). Append-only: the
    entries below a view's length never change while a context views them. ``live_ids`` and
    ``by_uid`` index every entry of the log (ids and uids are unique in it: each entry was
    appended by a context whose view was the whole log and held neither)."""

    __slots__ = ("by_uid", "entries", "live_ids", "starts")

    def __init__(
        self,
        entries: list[tuple[Message, int]],
        starts: list[int],
        live_ids: dict[MessageId, int],
        by_uid: dict[int, Message],
    ) -> None:
        self.entries = entries
        self.starts = starts
        self.live_ids = live_ids
        self.by_uid = by_uid


_PHASES = frozenset({MsgState.ACTIVE, MsgState.SUSPENDED})
_LIVE_CLASSES = frozenset({BlockClass.ACTIVE, BlockClass.SUSPENDED, BlockClass.PINNED})
_PHASE_CLASS = {p: aggregate_within_context((p,)) for p in _PHASES}


class Context:
    """One agent context. Mutated only by the engine; policies see :class:`ContextInfo`."""

    __slots__ = (
        "_by_uid",
        "_entries",
        "_extra",
        "_first_reasoning",
        "_live",
        "_log",
        "_next_uid",
        "_pin_depth",
        "_starts",
        "_view",
        "agent",
        "block_size",
        "closed_at",
        "id",
        "is_open",
        "last_infer",
        "last_infer_op",
        "materialized",
        "one_shot",
        "opened_at",
        "packed",
        "parent",
        "phase",
        "pin_deadline",
        "refs",
        "session",
        "spawn",
        "stored",
        "suspended_at",
        "temporaries",
        "turn_start",
        "turns",
        "valid",
        "version",
    )

    def __init__(
        self,
        ctx: ContextId,
        session: SessionId,
        agent: AgentKind,
        *,
        block_size: int,
        t: float,
        parent: ContextId | None = None,
        spawn: SpawnRecord | None = None,
        one_shot: bool = False,
    ) -> None:
        self.id = ctx
        self.session = session
        self.agent = agent
        self.parent = parent
        self.spawn = spawn
        self.one_shot = one_shot
        self.block_size = block_size
        self.is_open = True
        self.opened_at = t
        self.closed_at: float | None = None
        self.phase = MsgState.ACTIVE
        # the sequence, held one of two ways (module docstring): in the context's own lists
        # (``_log`` None), or as the first ``_view`` entries of a log shared with forks, with
        # ``_extra`` the message instances this context knows that are not in its view
        self._entries: list[tuple[Message, int]] = []
        self._starts: list[int] = []
        self._by_uid: dict[int, Message] = {}
        self._live: dict[MessageId, int] = {}
        self._log: _Log | None = None
        self._view = 0
        self._extra: dict[int, Message] = {}
        self.stored: dict[int, MsgState] = {}
        self.temporaries: set[int] = set()
        self.pin_deadline: dict[int, float | None] = {}
        self.materialized: list[BlockSpec] = []
        self.valid = 0
        #: the full blocks of the logical sequence packed so far, a prefix of it (spec B6): edits
        #: cut it where they cut ``valid``, appends leave it, so an inference packs only the
        #: blocks it has not packed before -- whatever is resident (a rejected inference, or a
        #: chain evicted under pressure, re-packed the whole context every time)
        self.packed: list[BlockSpec] = []
        #: told of every key :attr:`packed` gains or loses, when the engine tracks which copies
        #: are live (a policy that moves KV, spec/movement.md MV6); None otherwise
        self.refs: PackedRefs | None = None
        self.last_infer: float | None = None
        self.last_infer_op = -1
        self.suspended_at: float | None = None
        self._next_uid = 0
        #: completed turns (``turn_end`` ops) and the token offset where the current turn began
        self.turns = 0
        self.turn_start = 0
        #: cache of the first reasoning message's index: -1 none, None unknown (after an edit)
        self._first_reasoning: int | None = -1
        self._pin_depth: int | None = None  # cache of the deepest pinned block, see pin_depth()
        #: bumped by the engine whenever anything a block's features depend on may have changed
        self.version = 0

    # ------------------------------------------------------------------ the sequence's storage

    @property
    def entries(self) -> list[tuple[Message, int]]:
        """The logical sequence, ``(message, uid)`` in order. Read it, never change it: a fork
        may share the list (module docstring); edits go through the methods below."""
        log = self._log
        if log is None:
            return self._entries
        if self._view == len(log.entries):
            return log.entries
        self._own()
        return self._entries

    @property
    def starts(self) -> list[int]:
        """The token offset of each entry of :attr:`entries` (read only, as it)."""
        log = self._log
        if log is None:
            return self._starts
        if self._view == len(log.starts):
            return log.starts
        self._own()
        return self._starts

    @property
    def messages_by_uid(self) -> dict[int, Message]:
        """Every message instance this context has admitted (expired ones too), by uid (read
        only)."""
        log = self._log
        if log is not None and not self._extra and self._view == len(log.entries):
            return log.by_uid
        self._own()
        return self._by_uid

    @property
    def live_ids(self) -> dict[MessageId, int]:
        """The uid of each message id in the sequence (read only)."""
        log = self._log
        if log is not None and self._view == len(log.entries):
            return log.live_ids
        self._own()
        return self._live

    def _own(self) -> None:
        """Hold the sequence in this context's own lists (a copy of its view), before a change
        other than an append at the shared log's end. Known uids keep their order (ascending:
        the order they were admitted in)."""
        log = self._log
        if log is None:
            return
        n = self._view
        entries = log.entries[:n]
        self._entries = entries
        self._starts = log.starts[:n]
        if n == len(log.entries):
            self._live = dict(log.live_ids)
            by_uid = dict(log.by_uid)
        else:
            self._live = {m.id: uid for m, uid in entries}
            by_uid = {uid: m for m, uid in entries}
        if self._extra:
            by_uid.update(self._extra)
            by_uid = dict(sorted(by_uid.items()))
        self._by_uid = by_uid
        self._log = None
        self._extra = {}

    def _share(self) -> _Log:
        """This context's sequence as a log a fork can view (the lists move, not copied)."""
        if self._log is not None:
            return self._log
        entries = self._entries
        if len(self._by_uid) == len(entries):  # (nothing expired: every known uid is an entry)
            by_uid, extra = self._by_uid, {}
        else:
            by_uid = {uid: m for m, uid in entries}
            extra = {u: m for u, m in self._by_uid.items() if u not in by_uid}
        self._log = _Log(entries, self._starts, self._live, by_uid)
        self._view = len(entries)
        self._extra = extra
        self._entries, self._starts, self._by_uid, self._live = [], [], {}, {}
        return self._log

    def _exclusive(self) -> None:
        """Raise unless the sequence is in this context's own lists (an edit is about to change
        it: a shared log must never change below a view)."""
        if self._log is not None:
            raise InternalError(f"{self.id!r}: an edit of a shared sequence (call _own first)")

    # ------------------------------------------------------------------ queries

    @property
    def total_tokens(self) -> int:
        entries = self.entries
        return self.starts[-1] + entries[-1][0].tokens if entries else 0

    def __len__(self) -> int:
        return self._view if self._log is not None else len(self._entries)

    def state(self, uid: int) -> MsgState | None:
        """The lifecycle state of message instance ``uid`` (spec L1); ``None`` if unknown."""
        if uid not in self.messages_by_uid:
            return None
        return self.stored.get(uid, self.phase)

    def states(self) -> dict[int, MsgState]:
        """:meth:`state` of every message instance ever admitted, by uid, built in one pass: a
        message without a stored state is in the context's phase (spec L4), and only admitted
        instances have a stored one. What a checker compares after every op."""
        out = dict.fromkeys(self.messages_by_uid, self.phase)
        out.update(self.stored)
        return out

    def message_states(self) -> Iterator[tuple[Message, MsgState]]:
        """Every message of the logical sequence with its state, in order."""
        for m, uid in self.entries:
            yield m, self.stored.get(uid, self.phase)

    def block_class(self, depth: int) -> BlockClass:
        """The class of the materialized block at ``depth`` in this context (spec L5.1).

        A pin protects its prefix too: a valid block at or above the deepest block covering a
        pinned message is Pinned unless it covers a Temporary or Expired message.
        """
        if depth >= self.valid:
            return BlockClass.EXPIRED
        if not self.stored and not self.pin_deadline:
            # (most blocks: covered_class is the phase's and pin_depth() is -1; per block keyed)
            return _PHASE_CLASS[self.phase]
        cls = self.covered_class(self.materialized[depth].uids)
        if depth <= self.pin_depth() and cls in _LIVE_CLASSES:
            return BlockClass.PINNED
        return cls

    def covered_class(self, uids: Sequence[int]) -> BlockClass:
        """The class in this context of a block covering message instances ``uids`` (spec L5.1),
        before pins of deeper messages are considered (see :meth:`block_class`). A message
        without a stored state is in the context's phase, so a block covering only such messages
        is in the phase's class: no aggregation."""
        stored = self.stored
        if stored and not stored.keys().isdisjoint(uids):
            return aggregate_within_context(stored.get(u, self.phase) for u in uids)
        return self.phase_class()

    def phase_class(self) -> BlockClass:
        """The class of a valid block that covers no message with a stored state and lies below
        every pin: the class of the context's phase (Active or Suspended)."""
        return _PHASE_CLASS[self.phase]

    def pin_depth(self) -> int:
        """Index of the deepest logical block covering a pinned message (-1 if none). Cached;
        recomputed (O(messages)) only after pins or token offsets change."""
        if self._pin_depth is None:
            deepest = -1
            if self.pin_deadline:
                for i, (m, uid) in enumerate(self.entries):
                    if uid in self.pin_deadline:
                        deepest = max(deepest, (self.starts[i] + m.tokens - 1) // self.block_size)
            self._pin_depth = deepest
        return self._pin_depth

    def first_reasoning_index(self) -> int | None:
        """Index of the first reasoning message (None: none). Cached: an append keeps the cache
        current and only an edit makes it unknown, so a turn end in a context without reasoning
        does not walk the context."""
        if self._first_reasoning is None:
            self._first_reasoning = next(
                (i for i, (m, _) in enumerate(self.entries) if m.kind is MessageKind.REASONING), -1
            )
        i = self._first_reasoning
        return None if i < 0 else i

    def first_reasoning_block(self) -> int | None:
        """Index of the block holding the first reasoning token (None: no reasoning). KV before
        it survives every turn-end strip (Lachesis's reasoning-stripped segment)."""
        i = self.first_reasoning_index()
        return None if i is None else self.starts[i] // self.block_size

    def first_temporary_index(self) -> int | None:
        if not self.temporaries:
            return None
        return min(i for i, (_, uid) in enumerate(self.entries) if uid in self.temporaries)

    def pack_from(self, first_block: int) -> list[BlockSpec]:
        """Packed blocks of the logical sequence from ``first_block`` on (tail may be partial),
        ``first_block <= valid``. Packs only what :attr:`packed` does not hold yet."""
        refs = self.refs
        if first_block > len(self.packed):
            # (the valid chain is a prefix of the logical sequence: it is what packing gives)
            more = self.materialized[len(self.packed) : first_block]
            self.packed[len(self.packed) :] = more
            if refs is not None:
                refs.add(more)
        done = len(self.packed)
        parent = self.packed[done - 1].key if done else ROOT_KEY
        if parent is None:
            raise InternalError("a packed block has no key")
        fresh = pack(
            self.entries, self.starts, first_block=done, parent=parent, block_size=self.block_size
        )
        if refs is not None:
            refs.add(fresh)  # (the partial tail has no key: not counted)
        if fresh and fresh[-1].key is None:  # the partial tail is never kept
            self.packed += fresh[:-1]
            return [*self.packed[first_block:], fresh[-1]]
        self.packed += fresh
        return self.packed[first_block:]

    def chain_keys(self) -> list[BlockKey]:
        return [s.key for s in self.materialized if s.key is not None]

    # ------------------------------------------------------------------ lifecycle plumbing

    def _apply(self, uid: int, event: Event, *, new: bool = False) -> MsgState:
        before = None if new else self.state(uid)
        after = transition(before, event, message=self._mid(uid), context=self.id)
        if after in _PHASES:
            if after is not self.phase:
                raise InternalError(
                    f"message {self._mid(uid)!r} of {self.id!r} would be {after.value} while "
                    f"its context is {self.phase.value}"
                )
            self.stored.pop(uid, None)
        else:
            self.stored[uid] = after
        if after is MsgState.TEMPORARY:
            self.temporaries.add(uid)
        else:
            self.temporaries.discard(uid)
        if after is not MsgState.PINNED:
            self.pin_deadline.pop(uid, None)
        if before is MsgState.PINNED or after is MsgState.PINNED:
            self._pin_depth = None
        return after

    def _mid(self, uid: int) -> str:
        """The message id of instance ``uid``, for messages (never copies a shared view)."""
        log = self._log
        if log is None:
            m = self._by_uid.get(uid)
        else:
            m = self._extra.get(uid)
            if m is None:
                m = log.by_uid.get(uid)
        return m.id if m is not None else f"#{uid}"

    def phase_event(self, event: Event) -> None:
        """RUN / INFER_START / INFER_END for every phase-following message at once (spec L4)."""
        self.phase = transition(self.phase, event, message="*", context=self.id)

    def _new_uid(self, m: Message, live: dict[MessageId, int], by_uid: dict[int, Message]) -> int:
        """A uid for a new instance of ``m``, known from now on (in ``by_uid``, the sequence's
        index); ``live``: the ids in the sequence."""
        if m.id in live:
            raise TraceError(
                f"message id {m.id!r} is already live in context {self.id!r}; ids must be unique "
                "within a context's sequence (use 'hash' to give two messages one KV identity)",
                field="id",
            )
        uid = self._next_uid
        self._next_uid += 1
        by_uid[uid] = m
        return uid

    def _invalidate_from(self, index: int) -> None:
        """Suffix invalidation from message ``index`` (spec B5)."""
        if index < len(self.starts):
            cut = self.starts[index] // self.block_size
            self.valid = min(self.valid, cut)
            if self.refs is not None:
                self.refs.remove(self.packed[cut:])
            del self.packed[cut:]

    def _restart(self, index: int) -> None:
        """Recompute token offsets from message ``index`` on (of the context's own lists)."""
        self._exclusive()
        self._pin_depth = None
        self._first_reasoning = None
        starts, entries = self._starts, self._entries
        del starts[index:]
        pos = starts[-1] + entries[len(starts) - 1][0].tokens if starts else 0
        for m, _ in entries[index:]:
            starts.append(pos)
            pos += m.tokens

    # ------------------------------------------------------------------ edits (spec P5-P9)

    def _check_room(self, extra: int) -> None:
        """A context never holds more than ``MAX_CONTEXT_TOKENS`` (spec/trace-format.md T3):
        packing and hashing are linear in a context's tokens, so a trace of a few lines must not
        be able to ask for billions of them."""
        total = self.total_tokens + extra
        if total > MAX_CONTEXT_TOKENS:
            raise TraceError(
                f"context {self.id!r} would hold {total:,} tokens; at most "
                f"{MAX_CONTEXT_TOKENS:,} (beyond any model's context window)",
                field="tokens",
            )

    def admit(self, messages: Sequence[Message], *, temporary: bool) -> None:
        """Append messages (the caller raises RUN first)."""
        self._check_room(sum(m.tokens for m in messages))
        event = Event.ADMIT_TEMPORARY if (temporary or self.one_shot) else Event.ADMIT
        log = self._log
        if log is not None and self._view != len(log.entries):
            self._own()  # (another view has appended to the log: this one copies)
            log = None
        if log is None:
            entries, starts, live, by_uid = self._entries, self._starts, self._live, self._by_uid
        else:  # the view is the whole log: append in place
            entries, starts, live, by_uid = log.entries, log.starts, log.live_ids, log.by_uid
        pos = starts[-1] + entries[-1][0].tokens if entries else 0
        for m in messages:
            uid = self._new_uid(m, live, by_uid)
            starts.append(pos)
            entries.append((m, uid))
            live[m.id] = uid
            pos += m.tokens
            if log is not None:
                self._view += 1
            self._apply(uid, event, new=True)
            if m.kind is MessageKind.REASONING and self._first_reasoning == -1:
                self._first_reasoning = len(entries) - 1

    def _check_index(self, index: int, field: str, *, allow_end: bool = False) -> None:
        hi = len(self) + (1 if allow_end else 0)
        if not 0 <= index < hi:
            raise TraceError(
                f"expected an index in [0, {hi}) for context {self.id!r} of "
                f"{len(self)} messages (got {index})",
                field=field,
            )

    def _expire(self, uid: int, event: Event) -> None:
        """Message instance ``uid`` leaves the sequence (the caller owns it: :meth:`_own`)."""
        self._exclusive()
        self._apply(uid, event)
        m = self._by_uid[uid]
        if self._live.get(m.id) == uid:
            del self._live[m.id]

    def replace(self, index: int, message: Message) -> None:
        self._check_index(index, "index")
        old_m, old_uid = self.entries[index]
        self._check_room(message.tokens - old_m.tokens)
        self._own()
        self._expire(old_uid, Event.INVALIDATE)
        uid = self._new_uid(message, self._live, self._by_uid)
        self._apply(uid, Event.ADMIT_TEMPORARY if self.one_shot else Event.ADMIT, new=True)
        self._entries[index] = (message, uid)
        self._live[message.id] = uid
        self._first_reasoning = None
        self._invalidate_from(index)
        if message.tokens != old_m.tokens:
            self._restart(index)

    def remove(self, index: int, count: int) -> None:
        self._check_index(index, "index")
        if index + count > len(self):
            raise TraceError(
                f"expected index + count <= {len(self)} for context {self.id!r} "
                f"(got {index} + {count})",
                field="count",
            )
        self._own()
        for _, uid in self._entries[index : index + count]:
            self._expire(uid, Event.INVALIDATE)
        self._invalidate_from(index)
        del self._entries[index : index + count]
        self._restart(index)

    def end_turn(self) -> int:
        """``turn_end``: strip the reasoning (spec P9); the next turn starts at the new end."""
        n = self.strip_reasoning()
        self.turns += 1
        self.turn_start = self.total_tokens
        return n

    def strip_reasoning(self) -> int:
        """Remove every reasoning message (spec P9). Returns how many. Walks the messages from
        the first reasoning one on (none without reasoning)."""
        first = self.first_reasoning_index()
        if first is None:
            return 0
        self._own()
        kept: list[tuple[Message, int]] = []
        n = 0
        for m, uid in self._entries[first:]:
            if m.kind is MessageKind.REASONING:
                self._expire(uid, Event.INVALIDATE)
                n += 1
            else:
                kept.append((m, uid))
        self._invalidate_from(first)
        self._entries[first:] = kept
        self._restart(first)
        self._first_reasoning = -1  # (every reasoning message is gone)
        return n

    def drop_temporaries(self) -> None:
        """After an inference: temporaries expire and leave the sequence (spec P8)."""
        first = self.first_temporary_index()
        if first is None:
            return
        self._own()
        self._invalidate_from(first)
        kept: list[tuple[Message, int]] = []
        for m, uid in self._entries:
            if uid in self.temporaries:
                self._expire(uid, Event.INFER_END)
            else:
                kept.append((m, uid))
        self._entries = kept
        self._restart(first)

    def _range(self, start: int | None, stop: int | None) -> range:
        n = len(self)
        lo = 0 if start is None else start
        hi = n if stop is None else stop
        if not 0 <= lo <= hi <= n:
            raise TraceError(
                f"expected 0 <= start <= stop <= {n} for context {self.id!r} (got start={lo}, "
                f"stop={hi})",
                field="stop" if stop is not None and hi > n else "start",
            )
        return range(lo, hi)

    def pin(self, start: int | None, stop: int | None, deadline: float | None) -> list[int]:
        """Pin a range; returns the uids now pinned (for TTL bookkeeping)."""
        pinned: list[int] = []
        for i in self._range(start, stop):
            uid = self.entries[i][1]
            if self._apply(uid, Event.PIN) is MsgState.PINNED:
                if uid in self.pin_deadline:
                    # overlapping pins: the longer protection wins; None (no TTL) is the longest
                    old = self.pin_deadline[uid]
                    deadline_now = None if old is None or deadline is None else max(old, deadline)
                else:
                    deadline_now = deadline
                self.pin_deadline[uid] = deadline_now
                pinned.append(uid)
        return pinned

    def unpin(self, start: int | None, stop: int | None) -> None:
        for i in self._range(start, stop):
            self.unpin_uid(self.entries[i][1])

    def unpin_uid(self, uid: int) -> None:
        ev = Event.UNPIN_RUNNABLE if self.phase is MsgState.ACTIVE else Event.UNPIN_WAITING
        self._apply(uid, ev)

    def close(self, t: float) -> None:
        """Every message Expired; the context can no longer be named by live ops (spec P11)."""
        self._own()
        for _, uid in self._entries:
            self._expire(uid, Event.CLOSE)
        self._entries = []
        self._starts = []
        if self.refs is not None:
            self.refs.remove(self.packed)
        self.packed = []  # a closed context never infers again: keep no specs for it
        self._first_reasoning = -1
        self.is_open = False
        self.closed_at = t

    def fork(self, ctx: ContextId, upto: int, t: float) -> Context:
        """A new branch sharing the first ``upto`` messages (spec P4).

        States are copied per branch (pins are not inherited; temporaries stay temporary); the
        branch inherits the valid materialized blocks that lie wholly inside the shared messages.
        """
        child = Context(
            ctx,
            self.session,
            self.agent,
            block_size=self.block_size,
            t=t,
            parent=self.id,
            spawn=self.spawn,
            one_shot=self.one_shot,
        )
        child._next_uid = self._next_uid
        shared_tokens = self.starts[upto] if upto < len(self) else self.total_tokens
        if self.temporaries:
            for _, uid in self.entries[:upto]:
                if uid in self.temporaries:
                    child.stored[uid] = MsgState.TEMPORARY
                    child.temporaries.add(uid)
        child._log = self._share()  # (the first upto messages, shared: not copied)
        child._view = upto
        first = self._first_reasoning
        child._first_reasoning = None if first is None else (-1 if first >= upto else first)
        keep = min(self.valid, shared_tokens // self.block_size)
        child.materialized = list(self.materialized[:keep])
        child.valid = keep
        if self.refs is not None:
            # the branch has packed what the parent packed inside the shared messages (the same
            # keys): a parent's copies stay live for it (spec/movement.md MV6)
            child.refs = self.refs
            child.packed = self.packed[: min(len(self.packed), shared_tokens // self.block_size)]
            self.refs.add(child.packed)
        return child
