"""The project's TOML files (scenarios, inventories) read and validated with every
problem as one line naming the file and the key."""
from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from fwbench.errors import FwbenchError


def read(path: str | Path, what: str) -> dict:
    """A TOML file's tables; `what` names the kind of file in the error."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise FwbenchError(f"{p}: no such {what} file") from None
    except tomllib.TOMLDecodeError as e:
        raise FwbenchError(f"{p}: malformed TOML: {e}") from None
    except OSError as e:
        raise FwbenchError(f"{p}: cannot read: {e.strerror}") from None


def one_line(e: ValidationError, origin: str, top: str = "scenario") -> str:
    """A pydantic validation error as one line: where, which key, what is wrong."""
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"]) or top
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    msg = msg.removeprefix("Value error, ")
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{origin}: {loc}: {msg}{more}"
