"""The exit status of a bench from its verdicts (a module of the benches, not a bench:
`make bench` runs only the files of bench/ that have a `__main__` block).

    print(json.dumps({**figures, "verdicts": verdicts}))
    return exit_status(verdicts)        # 0: every verdict passed; 1: one failed (named on stderr)

A verdict fails when it is False, the string "FAIL", or a mapping whose "pass" is False;
a mapping without "pass" holds verdicts itself (checked in turn); None is "not judged"
and fails nothing. A bench that measured nothing to judge passes `{}`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def failed(verdicts: Mapping[str, Any], prefix: str = "") -> list[str]:
    """The names of the verdicts that failed ('outer/inner' for nested ones)."""
    out: list[str] = []
    for name, value in verdicts.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            if "pass" in value:
                if value["pass"] is False:
                    out.append(path)
            else:
                out.extend(failed(value, f"{path}/"))
        elif value is False or (isinstance(value, str) and value.upper() == "FAIL"):
            out.append(path)
    return out


def exit_status(verdicts: Mapping[str, Any], bench: str = "") -> int:
    """0 when no verdict failed; else 1, the failed ones named on stderr."""
    bad = failed(verdicts)
    if bad:
        who = f"{bench}: " if bench else ""
        print(f"{who}FAILED verdicts: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0
