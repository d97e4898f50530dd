"""One exception hierarchy for every bad input scwork can meet.

Every error says *what* is wrong, *where* (which field, position, table, device...)
and *how to fix it*. All of them derive from :class:`ScworkError`; the ones caused
by a bad value also derive from :class:`ValueError` so generic callers can catch
them the usual way.

Examples
--------
>>> import scwork
>>> try:
...     scwork.layout.parse("f32[3,5]{1,0:T(2,2)")
... except scwork.errors.LayoutError as err:
...     print(err.position)
19
"""

from __future__ import annotations

__all__ = [
    "ScworkError",
    "ConfigError",
    "HardwareError",
    "TopologyError",
    "LayoutError",
    "InputError",
    "OutOfVocabularyError",
    "LimitExceededError",
    "ScheduleError",
    "MemoryFitError",
    "TraceError",
    "ShardError",
    "ScworkWarning",
    "StaticBufferWarning",
    "XlaDumpError",
    "NoFeasiblePlanError",
    "InternalError",
]


class ScworkError(Exception):
    """Base class of every error raised by scwork on purpose."""


class InternalError(RuntimeError):
    """One of scwork's own invariants failed: a bug in scwork, not a problem with your input.

    Nothing you pass should ever cause it; if you see one, please report it to scwork's
    maintainers with the call that raised it. It is deliberately *not* a :class:`ScworkError` (and not a
    :class:`ConfigError`): code that catches scwork's input errors to show them to a
    user must not swallow a bug. The message names the invariant and where it broke.
    """


class ConfigError(ScworkError, ValueError):
    """A configuration value is out of range, of the wrong type, or inconsistent."""


class HardwareError(ConfigError):
    """Unknown chip name, or a hardware override that makes no sense."""


class TopologyError(ConfigError):
    """A topology that cannot exist (zero chips, shape that does not match, ...)."""


class LayoutError(ScworkError, ValueError):
    """A layout string or layout request is malformed.

    Attributes
    ----------
    text : str or None
        The text being parsed, when the error comes from the parser.
    position : int or None
        0-based character offset in ``text`` where the problem was found.
    reason : str
        The problem itself, without location information.
    """

    def __init__(self, reason: str, text: str | None = None, position: int | None = None,
                 hint: str | None = None):
        self.reason = reason
        self.text = text
        self.position = position
        self.hint = hint
        message = reason
        if text is not None and position is not None:
            message += f" (at position {position} of {text!r})"
            # A caret line makes the position obvious in a terminal or notebook.
            shown = text if len(text) <= 120 else text[:120] + "..."
            if position <= 120:
                message += f"\n    {shown}\n    {' ' * position}^"
        elif text is not None:
            message += f" (in {text!r})"
        if hint:
            message += f"\nHow to fix: {hint}"
        super().__init__(message)


class InputError(ScworkError, ValueError):
    """Embedding ids, weights or batch structure that cannot be processed.

    Negative ids, NaN/infinite weights, ragged arrays whose lengths disagree, wrong
    dtypes, or a batch that does not divide over devices and SparseCores.
    """


class OutOfVocabularyError(InputError):
    """An id is >= the vocabulary size of its table.

    Attributes
    ----------
    feature, sample, id, vocab_size
        Where the first offending id was found and the bound it broke.
    count : int
        How many ids of the batch are out of vocabulary in total.
    """

    def __init__(self, message: str, *, feature=None, sample=None, id=None, vocab_size=None,
                 count: int = 1):
        self.feature = feature
        self.sample = sample
        self.id = id
        self.vocab_size = vocab_size
        self.count = count
        super().__init__(message)


class LimitExceededError(ScworkError):
    """Observed ids exceed a configured limit and id dropping is not allowed.

    The reference implementation aborts the process here; scwork raises instead.

    Attributes
    ----------
    limit : str
        Which limit, e.g. ``"max_ids_per_partition"``.
    stack, table, device, sc, partition
        Where it overflowed (None where not applicable).
    observed, configured : int
        The observed count and the configured limit.
    bucket, sample : int or None
        The mini-batching bucket or the sample that cannot fit on its own.
    required : int or None
        The smallest limit that would let mini-batching succeed.
    """

    def __init__(self, message: str, *, limit: str, observed: int, configured: int,
                 stack=None, table=None, device=None, sc=None, partition=None,
                 bucket=None, sample=None, required=None):
        self.bucket = bucket
        self.sample = sample
        self.required = required
        self.limit = limit
        self.observed = observed
        self.configured = configured
        self.stack = stack
        self.table = table
        self.device = device
        self.sc = sc
        self.partition = partition
        super().__init__(message)


class ScheduleError(ScworkError, RuntimeError):
    """A schedule is wrong: executing it gives a wrong result, or it breaks a promise.

    Raised when a node ends (or, at a given step, already is) with data that is not
    what the collective must produce, when a transfer combines the same contribution
    twice, or when two transfers use one directed link in one step and conflicts
    were asked to raise.

    Attributes
    ----------
    step : int or None
        0-based step at which the problem was detected (None: found at the end).
    node : int or None
        Node holding the wrong data (or the sender, for link conflicts).
    shard : tuple of int or None
        ``(start, stop)`` chunk range that is wrong, in the schedule's chunk units.
    link : int or None
        Link id, for link conflicts.
    """

    def __init__(self, message: str, *, step=None, node=None, shard=None, link=None):
        self.step = step
        self.node = node
        self.shard = shard
        self.link = link
        super().__init__(message)


class MemoryFitError(ScworkError):
    """The model does not fit in SparseCore SPMEM or chip HBM.

    Attributes
    ----------
    resource : {"spmem", "hbm", "spmem+hbm"}
        What overflowed.
    findings : tuple of Finding
        The error findings, each with its evidence and fixes.
    required_bytes : int
        Largest requirement that does not fit (bytes per tile for SPMEM, bytes per
        chip for HBM).
    available_bytes : int
        The capacity it was compared with (after HBM headroom).
    stack : str or None
        The first stack that does not fit in SPMEM (None for HBM).
    report : object
        The :class:`~scwork.memory.MemoryReport` (or dataset) behind the error.
    """

    def __init__(self, message: str, *, resource: str, findings=(), required_bytes: int = 0,
                 available_bytes: int = 0, stack: str | None = None, report=None):
        self.resource = resource
        self.findings = tuple(findings)
        self.required_bytes = int(required_bytes)
        self.available_bytes = int(available_bytes)
        self.stack = stack
        self.report = report
        super().__init__(message)


class NoFeasiblePlanError(ScworkError):
    """No candidate of a plan search meets the constraints (:func:`scwork.plan.search`).

    Attributes
    ----------
    constraint : str
        The tightest constraint: the one the fewest candidates meet (e.g.
        ``"max_drop_rate"``, ``"fits_spmem"``).
    closest : dict
        The knobs and figures of the candidate closest to meeting every constraint.
    shortfall : dict
        Per constraint, how many candidates fail it.
    """

    def __init__(self, message: str, *, constraint: str, closest=None, shortfall=None):
        self.constraint = constraint
        self.closest = dict(closest or {})
        self.shortfall = dict(shortfall or {})
        super().__init__(message)


class TraceError(InputError):
    """A trace that viewers would reject or misdraw, or that cannot be read.

    Attributes
    ----------
    problems : list of str
        Every problem found (the message shows the first ones).
    """

    def __init__(self, problems):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        shown = self.problems[:10]
        more = f"\n... and {len(self.problems) - 10} more" if len(self.problems) > 10 else ""
        super().__init__(f"{len(self.problems)} problem(s) in the trace:\n- " + "\n- ".join(shown) + more)


class ShardError(InputError):
    """A shard (file or partition) cannot be read or does not match the expected schema.

    Attributes
    ----------
    path : str or None
        The file (or ``"partition <i>"`` of a dask collection).
    column : str or None
        The column, when the problem is in one column.
    """

    def __init__(self, message: str, *, path: str | None = None, column: str | None = None):
        self.path = path
        self.column = column
        super().__init__(message)


class ScworkWarning(UserWarning):
    """Base class of every warning scwork emits on purpose."""


class StaticBufferWarning(ScworkWarning):
    """Ids did not fit a static CSR buffer (``suggested_coo_buffer_size_per_device``) and
    were dropped, as jax-tpu-embedding drops them; ``dropped_ids`` and
    ``static_buffer_dropped_ids`` of the statistics count them."""


class XlaDumpError(InputError):
    """An XLA dump file (``--xla_dump_to``) or a TPU out-of-memory message that cannot be read.

    Attributes
    ----------
    path : str or None
        The file (``"<text>"`` for text passed directly).
    line : int or None
        1-based line of the problem in ``path``.
    reason : str
        The problem itself, without location information.
    hint : str or None
        How to fix it.
    """

    def __init__(self, reason: str, *, path: str | None = None, line: int | None = None,
                 hint: str | None = None):
        self.reason = reason
        self.path = path
        self.line = line
        self.hint = hint
        where = f"{path}:{line}: " if path is not None and line is not None else (f"{path}: " if path else "")
        super().__init__(where + reason + (f"\nHow to fix: {hint}" if hint else ""))

