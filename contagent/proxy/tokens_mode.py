"""The ``--tokens`` modes and their one check, for every command that takes the option.

``auto`` records token data when the upstream is vLLM, ``on`` insists on it, ``off`` never
asks; :func:`contagent.proxy.identify.plan_tokens` resolves a mode against the upstream.
Kept apart from that resolver so that checking a command's options imports nothing more.
"""

from __future__ import annotations

from typing import Literal, get_args

from contagent.errors import ContagentError

TokensMode = Literal["auto", "on", "off"]
TOKENS_MODES: tuple[str, ...] = get_args(TokensMode)


def check_tokens_mode(mode: str) -> str:
    """``mode`` when it is a ``--tokens`` mode; raises :class:`ContagentError` with one line."""
    if mode not in TOKENS_MODES:
        raise ContagentError(f"--tokens {mode!r}: use one of {', '.join(TOKENS_MODES)}")
    return mode
