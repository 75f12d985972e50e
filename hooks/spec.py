"""What a configured hook is (`HookSpec`) and what one run of it did (`HookResult`)."""

from __future__ import annotations

from dataclasses import dataclass

from fetchwork.config.pyref import is_python_ref

DEFAULT_OUTPUT_LIMIT = 1048576


@dataclass(frozen=True)
class HookSpec:
    """One configured hook: what `<KEYWORD>_HOOK_<NAME>` and its knobs say."""

    hook: str
    keyword: str
    value: str
    args: tuple[str, ...] = ()
    timeout_s: float = 60.0
    output_limit: int = DEFAULT_OUTPUT_LIMIT

    @property
    def in_process(self) -> bool:
        return is_python_ref(self.value)


@dataclass
class HookResult:
    """What one run of a hook did."""

    spec: HookSpec
    argv: list[str]
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    output_too_large: bool = False
    duration_s: float = 0.0
    error: str | None = None
    cancelled: bool = False

    @property
    def ok(self) -> bool:
        """It ran, exited 0, and was not killed, timed out or over its output limit."""
        return (self.error is None and self.exit_code == 0 and self.signal is None
                and not self.timed_out and not self.output_too_large and not self.cancelled)

    def outcome(self) -> str:
        """A short description for log lines."""
        if self.error is not None:
            return f"refused or failed: {self.error}"
        if self.timed_out:
            return f"timed out after {self.spec.timeout_s:g}s, killed"
        if self.cancelled:
            return "cancelled by its caller, killed"
        if self.output_too_large:
            return f"output over {self.spec.output_limit} bytes, killed"
        if self.signal is not None:
            return f"killed by signal {self.signal}"
        return f"exit {self.exit_code}"
