"""Why a compaction DSH asked for failed, and the one place that says it on the wire.

Compaction raises `CompactionFailed` with a `Failure` code; the engine answers the call with
`error_info(failure)`. Most codes are DSH's `ManualCompactionError` codes (the shim rethrows
them as that error, so `/compact` shows the message and DSH's own compaction paths recognise
the failure); the two range refusals of `compactRegion` are plain errors.
"""

from __future__ import annotations

from enum import Enum

from turn_memory.bridge.protocol import ErrorInfo, ManualCode


class Failure(Enum):
    #: another compaction holds the session, a turn is open, or the start could not land
    BUSY = "busy"
    CANCELLED = "cancelled"
    #: the selected history changed under the compaction
    CHANGED = "changed"
    #: no checkpoint came out of the workers or the summary request
    SUMMARY = "summary"
    #: the commit could not land, or landed only in part
    COMMIT = "commit"
    #: committed, but the session could not be saved
    PERSISTENCE = "persistence"
    #: compactRegion outside a turn: automatic compaction events belong to one
    NO_OPEN_TURN = "no-open-turn"
    #: compactRegion over a range that is not on the surface, or splits a tool pair
    BAD_RANGE = "bad-range"


#: each code's ManualCompactionError code (the range refusals have none)
_MANUAL: dict[Failure, ManualCode] = {Failure.BUSY: "busy", Failure.CANCELLED: "cancelled", Failure.CHANGED: "changed",
                                      Failure.SUMMARY: "summary", Failure.COMMIT: "commit",
                                      Failure.PERSISTENCE: "persistence"}


class CompactionFailed(Exception):
    """A compaction failed and the conversation is as it was (unless the message says otherwise)."""

    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message


def error_info(failed: CompactionFailed) -> ErrorInfo:
    """The failure as the shim expects it."""
    manual = _MANUAL.get(failed.failure)
    if manual is None:
        return ErrorInfo(code=failed.failure.value, message=failed.message)
    return ErrorInfo(code=f"compaction-{manual}", message=failed.message, manual=manual)
