from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The helpers beside these tests import as top-level modules under any import mode.
sys.path.insert(0, str(Path(__file__).parent))

from fake_hub import FakeHub


@pytest.fixture
def hub_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No saved login, no HF_TOKEN, and the LFS protocol (the stand-in has no Xet)."""
    from huggingface_hub import constants

    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


@pytest.fixture
def fake_hub(hub_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The stand-in Hub, configured as if HF_ENDPOINT pointed at it (as the CLI tests do)."""
    from huggingface_hub import constants

    hub = FakeHub().start()
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_URL_HOSTS", constants.HF_URL_HOSTS | {"127.0.0.1"})
    try:
        yield hub
    finally:
        hub.stop()
