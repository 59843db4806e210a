"""``contagent view`` on 10,000 rollouts: start-up and the list page's first paint.

Builds a results.jsonl of ``--rollouts`` synthetic rows (clones of the exported
sample rollouts, with spread-out experiments, outcomes, tokens and wall times),
starts ``contagent view`` on it in a fresh process, then opens the rollout list,
sorted by tokens, in headless Chromium and reads the browser's own
``first-contentful-paint`` (median of ``--rounds`` loads). Printed beside:

* the target (2 s) and
* the baseline: the same list template with every rollout on one page (what a
  viewer that ships all rows at once would paint), served as a static file.

Without selenium and chromium (``pip install -e '.[browser]'``, Debian's
``chromium chromium-driver``) it prints the server-side page times only.
Usage: ``python benchmarks/viewer_bench.py [--rollouts 10000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 2.0


def make_results(out: Path, n: int, seed: int = 0) -> int:
    """Export the samples, then write ``n`` rows cloned from them into ``out``."""
    sample_out = out / "sample"
    subprocess.run(
        [sys.executable, "-m", "contagent", "export", str(REPO / "data" / "rollouts")]
        + ["--out", str(sample_out), "--filter", "all", "--format", "results"],
        check=True,
        capture_output=True,
    )
    templates = [
        orjson.loads(line)
        for line in (sample_out / "results.jsonl").read_bytes().split(b"\n")
        if line
    ]
    rng = random.Random(seed)
    with (out / "results.jsonl").open("wb") as f:
        for i in range(n):
            row = dict(rng.choice(templates))
            passed = rng.random() < 0.6
            billed = rng.randint(2_000, 400_000)
            row |= {
                "rollout_id": f"roll-{i:05d}",
                "experiment": f"exp_{rng.randint(0, 49):03d}",
                "passed": passed,
                "status": "passed" if passed else "failed",
                "reward": 1.0 if passed else 0.0,
                "duration_s": round(rng.uniform(20, 1800), 1),
                "token_usage": {
                    "billed": {
                        "prompt_tokens": billed,
                        "completion_tokens": 0,
                        "total_tokens": billed,
                    },
                    "selected": {
                        "prompt_tokens": billed,
                        "completion_tokens": 0,
                        "total_tokens": billed,
                    },
                    "excluded": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
                },
            }
            f.write(orjson.dumps(row) + b"\n")
    shutil.rmtree(sample_out)
    return (out / "results.jsonl").stat().st_size


def start_viewer(folder: Path) -> tuple[subprocess.Popen[str], str, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "contagent", "view", str(folder), "--no-open", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    ready = time.perf_counter() - started
    if " on http" not in line:
        proc.kill()
        raise SystemExit(f"viewer did not start: {line!r}")
    return proc, line.split(" on ", 1)[1].split(" ", 1)[0], ready


def baseline_site(folder: Path) -> Path:
    """The list page with every row, rendered by the viewer's own template, plus its static files."""
    from contagent.viewer import listing
    from contagent.viewer.app import TEMPLATES, _static_files
    from contagent.viewer.source import open_source

    source = open_source(folder)
    query = listing.Query(sort="tokens", desc=True, per=len(source.entries))
    html = TEMPLATES.get_template("list.html").render(
        source=source,
        path=str(folder),
        page=listing.select(source.entries, query),
        columns=listing.COLUMNS,
        options=listing.options(source.entries),
        generation=source.generation,
    )
    site = folder / "site"
    (site / "static").mkdir(parents=True)
    (site / "index.html").write_text(html)
    for name, (body, _) in _static_files().items():
        (site / "static" / name).write_bytes(body)
    return site


def serve_static(site: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=site,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=5).read()
            break
        except OSError:
            time.sleep(0.1)
    return proc, url


def http_time(url: str, rounds: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as resp:
            size = len(resp.read())
        times.append(time.perf_counter() - t0)
    return statistics.median(times), size


def paint_time(url: str, rounds: int) -> tuple[float, float] | None:
    """Median first-contentful-paint and load-event times in Chromium, in seconds."""
    try:
        from selenium import webdriver
    except ImportError:
        return None
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not binary or not driver:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,860",
    ):
        options.add_argument(arg)
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    chrome.set_page_load_timeout(300)
    try:
        chrome.get(url)  # warm the browser itself
        times: list[float] = []
        loads: list[float] = []
        for _ in range(rounds):
            chrome.get("about:blank")
            chrome.get(url)
            fcp = chrome.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "new PerformanceObserver((list) => {"
                "  for (const e of list.getEntries())"
                "    if (e.name === 'first-contentful-paint') done(e.startTime);"
                "}).observe({type: 'paint', buffered: true});"
                "setTimeout(() => done(null), 10000);"
            )
            nav = chrome.execute_script(
                "return performance.getEntriesByType('navigation')[0].loadEventEnd;"
            )
            loads.append(nav / 1000)
            times.append(fcp / 1000 if fcp is not None else float("nan"))
        return statistics.median(times), statistics.median(loads)
    finally:
        chrome.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="viewer-bench-") as tmp:
        folder = Path(tmp)
        size = make_results(folder, args.rollouts)
        proc, url, ready = start_viewer(folder)
        static, static_url = serve_static(baseline_site(folder))
        try:
            pages = {
                "list, 50 a page (contagent view)": f"{url}rollouts?sort=tokens&order=desc",
                f"baseline: all {args.rollouts:,} on one page": static_url,
                "summary with charts": url,
            }
            rows = []
            for label, page in pages.items():
                server_s, html = http_time(page, args.rounds)
                paint = paint_time(page, args.rounds) if "summary" not in label else None
                rows.append((label, server_s, html, paint))
        finally:
            for p in (proc, static):
                p.terminate()
                p.wait(timeout=30)
    print(
        f"{args.rollouts:,} rollouts, results.jsonl {size / 1e6:.0f} MB; viewer ready in {ready:.2f} s"
    )
    print(
        f"{'page':<36} {'server s':>9} {'HTML KB':>8} {'first paint s':>14} {'loaded s':>9} "
        f"{'target (first paint) s':>23}"
    )
    for label, server_s, html, paint in rows:
        fcp, load = (f"{v:.2f}" for v in paint) if paint is not None else ("n/a", "n/a")
        print(
            f"{label:<36} {server_s:>9.3f} {html / 1024:>8.0f} {fcp:>14} {load:>9} {TARGET_S:>23.1f}"
        )


if __name__ == "__main__":
    main()
