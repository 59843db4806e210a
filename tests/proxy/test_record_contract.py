"""The proxy's hand-built record dicts match the contract: the pydantic models and the JSON Schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import orjson
import pytest
from pydantic import ValidationError

from contagent.rawlog.records import (
    BASE_VERSION,
    POLICY_VERSION,
    OutcomeRecord,
    RequestRecord,
    outcome_record,
    request_record,
    with_policy_version,
)
from contagent.testing.llm_stub import Error, Reply, ToolCall
from tests.proxy.helpers import client, json_stream_error

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_builders_have_exactly_the_model_fields():
    req = request_record(
        index=0, rollout_id="r", time=1.0, method="POST", path="/v1/x", headers={}, body=None,
        body_text=None, body_sha256="0" * 64, body_bytes=0, stream=False, upstream_changes=[],
    )  # fmt: skip
    out = outcome_record(index=0, rollout_id="r", outcome="completed", status=200, client_status=200,
                         started=1.0, first_byte=1.0, ended=1.0)  # fmt: skip
    # policy_version is added by with_policy_version (a rollout engine's proxy) only, the
    # token route's fields by the token route only
    req_later, out_later = {"policy_version", "upstream"}, {"policy_version", "upstream", "drawn"}
    assert [*req, "policy_version", "upstream"] == list(RequestRecord.model_fields)
    assert [*out, "policy_version", "upstream", "drawn"] == list(OutcomeRecord.model_fields)
    assert RequestRecord.model_validate(req).model_dump(exclude=req_later) == req
    assert OutcomeRecord.model_validate(out).model_dump(exclude=out_later) == out
    for model, record, later in ((RequestRecord, req, req_later), (OutcomeRecord, out, out_later)):
        stamped = with_policy_version(dict(record), 4)
        assert stamped["schema_version"] == POLICY_VERSION and stamped["policy_version"] == 4
        dumped = model.model_validate(stamped).model_dump(exclude=later - {"policy_version"})
        assert dumped == stamped
        with pytest.raises(ValidationError):
            model.model_validate({**stamped, "policy_version": -1})


def test_recorded_lines_validate_against_the_json_schemas(stub_factory, proxy_factory, tmp_path):
    stub = stub_factory([
        Reply(tool_calls=[ToolCall("terminal", {"command": "ls"})], reasoning_content="hm"),
        Reply(content="streamed", chunks=4),
        Error(500),
    ])  # fmt: skip
    proxy = proxy_factory(stub.url)
    c = client(proxy, max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    json_stream_error(c, msgs)
    proxy.stop()
    schemas = {
        "request": json.loads((SCHEMAS / "request-record.schema.json").read_text()),
        "outcome": json.loads((SCHEMAS / "outcome-record.schema.json").read_text()),
    }
    lines = (tmp_path / "records" / "r1" / "exchanges.jsonl").read_bytes().splitlines()
    assert len(lines) == 6
    for line in lines:
        rec = orjson.loads(line)
        jsonschema.validate(rec, schemas[rec["type"]])


def test_builders_refuse_unknown_and_missing_fields():
    import pytest

    with pytest.raises(TypeError, match="has no field colour"):
        outcome_record(index=0, rollout_id="r", outcome="completed", started=1.0, ended=1.0,
                       colour="red")  # fmt: skip
    with pytest.raises(TypeError, match="needs ended"):
        outcome_record(index=0, rollout_id="r", outcome="completed", started=1.0)


def test_builders_fill_defaults_fresh_each_time():
    first = outcome_record(index=0, rollout_id="r", outcome="completed", started=1.0, ended=1.0)
    second = outcome_record(index=1, rollout_id="r", outcome="completed", started=1.0, ended=1.0)
    assert first["finish_reasons"] == [] and first["finish_reasons"] is not second["finish_reasons"]
    assert first["schema_version"] == BASE_VERSION  # no policy_version: the version before it
    assert first["type"] == "outcome" and first["status"] is None
