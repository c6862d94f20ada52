"""The scene's description: the public mutations that rebuild a scene in another process."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def described(method: Callable[..., Any]) -> Callable[..., Any]:
    """Record a successful public mutation in the scene's description (see
    MujocoScene.description): the calls that rebuild this scene in another process.
    Only the outermost call is recorded (a mutation may call another one)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        self._describing += 1
        try:
            result = method(self, *args, **kwargs)
        finally:
            self._describing -= 1
        if self._describing == 0:
            if method.__name__ in ("clear", "load_scene"):
                self._description.clear()  # everything before is replaced
            if method.__name__ != "clear":
                self._description.append((method.__name__, args, kwargs))
        return result

    return wrapper
