"""The viewer over real HTTP: pages match results.jsonl, nothing outside PATH is served."""

from __future__ import annotations

import html
import http.client
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

import orjson
import pytest

from contagent.viewer import source as source_mod
from contagent.viewer.app import Viewer
from tests.helpers import cli, read_rows, write_rows
from tests.viewer.helpers import SCRIPT, XSS_ID, serve, xss_rollout


def get(viewer: Viewer, path: str, method: str = "GET", host: str | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", viewer.port, timeout=30)
    conn.putrequest(method, path, skip_host=host is not None)
    if host is not None:
        conn.putheader("Host", host)
    conn.endheaders()
    resp = conn.getresponse()
    body = resp.read().decode("utf-8", errors="replace")
    conn.close()
    return resp.status, body, dict(resp.getheaders())


def test_list_pages_filters_and_sorts_on_the_server(
    export_viewer: Viewer, export_dir: Path
) -> None:
    rows = read_rows(export_dir / "results.jsonl")
    status, body, _ = get(
        export_viewer, "/rollouts?" + urlencode({"sort": "tokens", "order": "desc", "per": 3})
    )
    assert status == 200
    by_tokens = sorted(
        rows,
        key=lambda r: (r["token_usage"]["billed"]["total_tokens"], r["rollout_id"]),
        reverse=True,
    )
    shown = [
        line.split('">', 1)[1].split("<", 1)[0] for line in body.split('class="rid" href="')[1:]
    ]
    assert shown == [r["rollout_id"] for r in by_tokens[:3]]
    assert f'page <span id="page">1</span> of {-(-len(rows) // 3)}' in body

    status, body, _ = get(
        export_viewer, "/rollouts?" + urlencode({"f.training_ready": "no", "per": 500})
    )
    not_ready = sorted(r["rollout_id"] for r in rows if not r["training_ready"])
    assert body.count('class="rid"') == len(not_ready) > 0
    for rid in not_ready:
        assert f">{rid}</a>" in body
    _, body, _ = get(export_viewer, "/rollouts?" + urlencode({"min.excluded": 2, "per": 500}))
    assert body.count('class="rid"') == sum(len(r["excluded"]) >= 2 for r in rows) > 0


def test_rollout_page_shows_steps_exclusions_and_raw_exchange(
    export_viewer: Viewer, export_dir: Path
) -> None:
    row = next(r for r in read_rows(export_dir / "results.jsonl") if r["rollout_id"] == "retries")
    status, body, _ = get(export_viewer, "/rollouts/retries")
    assert status == 200
    for step in row["steps"]:
        assert f'id="x{step["exchange_index"]}"' in body
    for exc in row["excluded"]:
        assert f"excluded: {exc['reason']}" in body
        if exc["duplicate_of"] is not None:
            assert f'href="#x{exc["duplicate_of"]}"' in body
    index = row["excluded"][0]["exchange_index"]
    status, body, _ = get(export_viewer, f"/rollouts/retries/exchanges/{index}")
    assert status == 200 and f'"index": {index}' in html.unescape(body)


def test_markup_from_rollouts_is_escaped_and_pages_carry_a_csp(export_viewer: Viewer) -> None:
    for path in (f"/rollouts/{XSS_ID}", "/rollouts", "/"):
        status, body, headers = get(export_viewer, path)
        assert status == 200
        assert "<script>window" not in body and "<img src=x" not in body
        assert "script-src 'self'" in headers["Content-Security-Policy"]
    _, body, _ = get(export_viewer, f"/rollouts/{XSS_ID}")
    assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in body


@pytest.mark.parametrize(
    "path",
    [
        "/static/../../../etc/passwd",
        "/static/..%2f..%2f..%2fetc%2fpasswd",
        "/static/%2e%2e/secret.txt",
        "/static/../app.py",
        "/rollouts/..%2fsecret.txt",
        "/rollouts/../../secret.txt",
        "/rollouts/clean_pass/files/..%2f..%2fsecret",
        "/rollouts/clean_pass/exchanges/..%2f1",
        "/secret.txt",
        "/../secret.txt",
        "/results.jsonl",
        "/charts/1/..%2f..%2fsecret.svg",
    ],
)
def test_no_url_reaches_a_file_outside_the_app(export_dir: Path, path: str) -> None:
    (export_dir.parent / "secret.txt").write_text("TOPSECRET")
    (export_dir / "secret.txt").write_text("TOPSECRET")
    with serve(export_dir) as running:
        status, body, _ = get(running.service, path)
    assert status in (400, 404), (path, status)
    assert "TOPSECRET" not in body and "root:" not in body


def test_a_row_cannot_point_the_raw_view_at_another_file(export_dir: Path) -> None:
    (export_dir.parent / "secret.txt").write_text('{"type": "request", "index": 0}\n')
    results = export_dir / "results.jsonl"
    rows = read_rows(results)
    rows[0]["raw_log"]["path"] = str(export_dir.parent / "secret.txt")
    rows[1]["raw_log"]["sha256"] = "0" * 64  # the named log, but not the one the row was made from
    write_rows(results, rows)
    with serve(export_dir) as running:
        for row, why in ((rows[0], "is not there"), (rows[1], "changed since")):
            status, body, _ = get(running.service, f"/rollouts/{row['rollout_id']}/exchanges/0")
            assert status == 404 and why in body


def test_read_only_and_loopback_names_only(export_viewer: Viewer) -> None:
    assert get(export_viewer, "/rollouts", method="POST")[0] == 405
    assert get(export_viewer, "/", method="DELETE")[0] == 405
    assert get(export_viewer, "/", host="attacker.example")[0] == 421
    assert get(export_viewer, "/", host=f"localhost:{export_viewer.port}")[0] == 200


def test_rows_the_reader_refuses_are_listed_with_their_reason(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_bytes(
        b'{"rollout_id": "bare", "training_ready": true}\n'
        b'{"rollout_id": "future", "schema_version": 99, "training_ready": true}\n'
        b"not json\n"
        b'{"rollout_id": "odd", "steps": "x", "token_usage": 3, "passed": "yes", "new": 1}\n'
    )
    with serve(tmp_path) as running:
        status, body, _ = get(running.service, "/rollouts")
        assert status == 200
        assert "schema_version 99 is newer" in body and "not JSON" in body
        assert "missing keys" in body
        status, body, _ = get(running.service, "/")
        assert status == 200 and '<td id="n-unreadable">4</td>' in body
        for rid in ("bare", "odd", "future"):
            assert get(running.service, f"/rollouts/{rid}")[0] == 404


def test_log_dir_rows_come_from_the_exporter_and_new_rollouts_appear(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(source_mod, "RESCAN_S", 0.0)
    with serve(run_dir) as running:
        viewer = running.service
        rollouts = len(list(run_dir.rglob("exchanges.jsonl")))
        _, body, _ = get(viewer, "/rollouts?per=500")
        assert body.count('class="rid"') == rollouts
        status, body, _ = get(viewer, "/rollouts/clean_pass/files/result")
        assert status == 200 and "verdict: passed &lt;script&gt;" in body
        _, body, _ = get(viewer, "/api/state")
        generation = orjson.loads(body)["generation"]
        xss_rollout(run_dir / "rollouts", "late_arrival")
        time.sleep(0.01)
        _, body, _ = get(viewer, "/rollouts?per=500")
        assert body.count('class="rid"') == rollouts + 1 and ">late_arrival</a>" in body
        assert orjson.loads(get(viewer, "/api/state")[1])["generation"] > generation


def test_a_rollout_still_being_written_shows_as_not_ready_not_a_crash(run_dir: Path) -> None:
    log = run_dir / "rollouts" / "clean_pass" / "exchanges.jsonl"
    log.write_bytes(log.read_bytes() + b'{"type": "request", "ind')
    with serve(run_dir) as running:
        status, body, _ = get(running.service, "/rollouts?per=500&q=clean_pass")
        assert ">clean_pass</a>" in body and "torn_line" in body
        status, _, _ = get(running.service, "/rollouts/clean_pass")
    assert status == 200


def test_cli_refuses_a_path_that_is_not_an_export_or_log_dir(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("hi")
    for path in (tmp_path / "missing", tmp_path / "x.txt"):
        proc = cli("view", str(path), "--no-open", "--port", "0")
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("contagent: error:") and proc.stderr.count("\n") == 1
        assert "Traceback" not in proc.stderr


def test_the_script_probe_is_in_the_row(export_dir: Path) -> None:
    row = next(r for r in read_rows(export_dir / "results.jsonl") if r["rollout_id"] == XSS_ID)
    assert SCRIPT in orjson.dumps(row).decode()


def test_cli_serves_until_interrupted(export_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "contagent", "view", str(export_dir), "--no-open", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "rollouts", timeout=30) as resp:
            assert resp.status == 200 and b">clean_pass</a>" in resp.read()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
