"""Errors a user can cause. The CLI prints them as one line and exits non-zero."""


class FwbenchError(Exception):
    """A problem the user can fix: bad input, a missing tool, no permission."""


class MeasurementInvalid(FwbenchError):
    """The measurement ran but cannot be trusted; the run loop records the trial
    `invalid`, and anywhere else it ends the command with one line as any error."""


class CommandError(FwbenchError):
    """An external command failed; the message carries its first line of stderr."""

    def __init__(self, argv: list[str], returncode: int, stderr: str):
        first = next((ln.strip() for ln in stderr.splitlines() if ln.strip()), "")
        super().__init__(f"{' '.join(argv[:4])}{' ...' if len(argv) > 4 else ''} "
                         f"exited {returncode}: {first or 'no message'}")
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
