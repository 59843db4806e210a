"""``ProxyOptions`` is the one statement of the proxy's options: given whole, as keywords,
or both (keywords over the object), and an unknown one is refused."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from contagent.proxy import ProxyOptions, RecordingProxy
from contagent.proxy.http1 import Limits


def test_options_object_and_keywords_combine(tmp_path):
    base = ProxyOptions(host="127.0.0.2", only_rollout="r1", stop_grace=5.0)
    proxy = RecordingProxy("http://127.0.0.1:9", tmp_path, base, stop_grace=1.0, tokens=True)
    assert (proxy.host, proxy._only_rollout, proxy._stop_grace, proxy.tokens) == (
        "127.0.0.2", "r1", 1.0, True,
    )  # fmt: skip
    assert isinstance(proxy.limits, Limits)


def test_defaults_come_from_the_options():
    proxy = RecordingProxy("http://127.0.0.1:9", "records")
    defaults = ProxyOptions()
    assert (proxy.host, proxy.port, proxy._max_connections) == (
        defaults.host, defaults.port, defaults.max_connections,
    )  # fmt: skip


def test_unknown_option_is_refused(tmp_path):
    with pytest.raises(TypeError, match="colour"):
        RecordingProxy("http://127.0.0.1:9", tmp_path, colour="red")


def test_the_proxy_states_no_option_of_its_own():
    params = set(inspect.signature(RecordingProxy.__init__).parameters)
    assert params == {"self", "upstream", "record_dir", "options", "given"}
    assert len(dataclasses.fields(ProxyOptions)) == 18
