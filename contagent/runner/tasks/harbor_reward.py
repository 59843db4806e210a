"""A Harbor verifier's reward, read as Harbor 0.26 reads it.

``/logs/verifier/reward.json`` when present: named numbers, ``reward`` the main
one (a bare number is the main one alone); else the one number in
``reward.txt``. Every value must be a finite number; the files are bounded.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

REWARD_LIMIT_BYTES = 64 * 1024


def parse_reward(verifier_dir: Path) -> tuple[float | None, dict[str, float] | None, str | None]:
    """``(reward, named rewards, why none)`` from a copied-out ``/logs/verifier``, as Harbor
    reads it: reward.json when present, else the one number in reward.txt."""
    as_json, as_text = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    if as_json.is_file():
        if as_json.stat().st_size > REWARD_LIMIT_BYTES:
            return None, None, f"reward.json over {REWARD_LIMIT_BYTES} bytes"
        try:
            data = json.loads(as_json.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return None, None, f"reward.json is not JSON ({str(exc)[:100]})"
        if not isinstance(data, dict):
            data = {"reward": data}
        rewards: dict[str, float] = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None, None, f"reward.json: {key!r} is not a number"
            if not math.isfinite(value):
                return None, None, f"reward.json: {key!r} is not finite"
            rewards[str(key)] = float(value)
        if "reward" not in rewards:
            return None, rewards, "reward.json has no 'reward' key"
        return rewards["reward"], rewards, None
    if as_text.is_file():
        text = as_text.read_bytes()[:REWARD_LIMIT_BYTES].decode("utf-8", errors="replace")
        try:
            value = float(text.strip())
        except ValueError:
            return None, None, f"reward.txt is not one number ({text.strip()[:50]!r})"
        if not math.isfinite(value):
            return None, None, "reward.txt is not finite"
        return value, {"reward": value}, None
    return None, None, "the verifier wrote no /logs/verifier/reward.json or reward.txt"
