from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
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
def fake_hub(hub_env: None) -> Iterator[FakeHub]:
    hub = FakeHub().start()
    try:
        yield hub
    finally:
        hub.stop()
