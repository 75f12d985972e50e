"""The exception hierarchy: one root, one subclass per kind of failure.

Errors from redis, psutil and the OS are translated into these once, at the
boundary where they happen, with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping


class FetchworkError(Exception):
    """Root of every error fetchwork raises on purpose."""


class LocatedError(FetchworkError):
    """An error in some text: the message starts with `source:line:` when known."""

    def __init__(self, message: str, source: str | None = None, line: int | None = None):
        self.source = source
        self.line = line
        super().__init__(f"{self.where(source, line)}{message}")

    @staticmethod
    def where(source: str | None, line: int | None) -> str:
        if source is not None:
            return f"{source}:{line}: " if line is not None else f"{source}: "
        return f"line {line}: " if line is not None else ""


class ConfigError(LocatedError):
    """The configuration is malformed or a knob has an unusable value."""


class UndefinedKnobError(ConfigError):
    """A configuration knob was asked for but no source defines it."""


class AdError(LocatedError):
    """ClassAd text or an expression could not be parsed or converted."""

    def __init__(self, message: str, line: int | None = None, source: str | None = None):
        super().__init__(message, source, line)

    @staticmethod
    def where(source: str | None, line: int | None) -> str:
        # Ad text comes from hooks more often than files: "fetch hook: line 2: ".
        parts = [part for part in (source, f"line {line}" if line is not None else None) if part]
        return ": ".join(parts) + ": " if parts else ""


class RedisUnavailableError(FetchworkError):
    """The broker's Redis could not be reached or started."""


class ArgSyntaxError(FetchworkError):
    """An argument or environment string breaks HTCondor's old or new syntax."""


class SubmitFileError(LocatedError):
    """A submit description is malformed or asks for something fetchwork cannot do."""


class SlotStateError(FetchworkError):
    """A slot was asked to take a State/Activity edge that does not exist."""


class StarterError(FetchworkError):
    """The starter for a job could not be set up or spawned."""


class JobStartError(StarterError):
    """The job's process could not be started: a file or program the OS refused."""

    def __init__(self, message: str, errno: int = 0):
        super().__init__(message)
        self.errno = errno


class BrokerError(FetchworkError):
    """The broker refused or could not carry out a request."""


class JobIdError(BrokerError):
    """Text that should name a job (ClusterId.ProcId) or a cluster does not."""


class SubmitError(BrokerError):
    """A submission was refused; nothing of it was queued."""


class DependencyError(SubmitError):
    """A submission's dependencies (depends_on) name a missing job or form a cycle."""


class HoldTimeError(FetchworkError):
    """A hold time given on the command line (--for, --until) cannot be used."""


class UserLogError(FetchworkError):
    """A job event log (the submit command `log`) could not be read."""


# -- the Python API (fetchwork.Schedd) -------------------------------------------------

class EditError(BrokerError):
    """An edit of a job attribute was refused: the attribute may not change, or the value is bad."""


class JobActionError(BrokerError):
    """A job action fetchwork does not carry out (Suspend, Continue, RemoveX) or does not know."""


class NoMatchingJobsError(BrokerError):
    """The jobs an edit names are not in the queue."""


class SubmissionFilteredError(SubmitError):
    """The pool's submission filters failed some jobs of a submission; the others are queued."""

    def __init__(self, message: str, result: object, failed: Mapping[str, str]):
        super().__init__(message)
        self.result = result  # the cluster's SubmitResult (fetchwork.schedd)
        self.failed = dict(failed)  # job id -> the reason it failed


class TransferError(FetchworkError):
    """A file transfer failed; `code` is HTCondor's HoldReasonCode for it (13 an
    input, 12 an output, 32/33 a size limit) and `subcode` a plugin's exit code."""

    def __init__(self, message: str, code: int = 13, subcode: int = 0):
        super().__init__(message)
        self.code = code
        self.subcode = subcode
