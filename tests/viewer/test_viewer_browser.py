"""The viewer in a real headless Chromium: what each page shows, checked against results.jsonl.

Needs the ``browser`` extra and Debian's ``chromium`` + ``chromium-driver``
(scripts/ci-browser.sh installs them); enabled with CONTAGENT_BROWSER_TESTS=1.
Screenshots go to CONTAGENT_SCREENSHOTS (the README's are made this way) or a temp dir.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contagent.charts.export_charts import summary_charts
from contagent.core.rows import summarize
from contagent.viewer.app import Viewer
from tests.helpers import read_rows
from tests.viewer.helpers import SCRIPT, XSS_ID, xss_rollout

pytestmark = pytest.mark.browser

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.select import Select  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.fail("chromium and chromedriver are needed (scripts/ci-browser.sh installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.add_argument("--window-size=1280,860")
    chrome = webdriver.Chrome(options=options, service=webdriver.ChromeService(driver))
    chrome.set_page_load_timeout(60)
    yield chrome
    chrome.quit()


@pytest.fixture()
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("CONTAGENT_SCREENSHOTS") or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def text(browser: webdriver.Chrome, css: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, css).text


def listed(browser: webdriver.Chrome) -> list[str]:
    return [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#rollouts a.rid")]


def test_summary_page_counts_and_charts(
    browser: webdriver.Chrome, export_viewer: Viewer, export_dir: Path, shots: Path
) -> None:
    rows = read_rows(export_dir / "results.jsonl")
    browser.get(export_viewer.url)
    assert text(browser, "#n-rollouts") == str(len(rows))
    assert text(browser, "#n-passed").startswith(f"{sum(r.get('passed') is True for r in rows)} ")
    assert text(browser, "#n-ready").startswith(f"{sum(r['training_ready'] for r in rows)} ")
    billed = sum(r["token_usage"]["billed"]["total_tokens"] for r in rows)
    assert text(browser, "#tokens-billed") == f"{billed:,}"
    images = browser.find_elements(By.CSS_SELECTOR, ".charts img")
    assert len(images) == len(summary_charts(summarize(rows))) >= 6
    WebDriverWait(browser, 30).until(
        lambda b: all(b.execute_script("return arguments[0].complete", i) for i in images)
    )
    for image in images:
        assert browser.execute_script("return arguments[0].naturalWidth", image) > 100
    browser.save_screenshot(str(shots / "summary.png"))


def test_list_sorts_filters_and_leads_to_a_rollout_and_its_raw_exchange(
    browser: webdriver.Chrome, export_viewer: Viewer, export_dir: Path, shots: Path
) -> None:
    rows = {r["rollout_id"]: r for r in read_rows(export_dir / "results.jsonl")}
    browser.get(export_viewer.url + "rollouts")
    assert sorted(listed(browser)) == sorted(rows)
    browser.find_element(By.ID, "sort-tokens").click()  # ascending
    browser.find_element(By.ID, "sort-tokens").click()  # descending
    tokens = [rows[rid]["token_usage"]["billed"]["total_tokens"] for rid in listed(browser)]
    assert tokens == sorted(tokens, reverse=True) and len(tokens) == len(rows)
    browser.save_screenshot(str(shots / "list.png"))

    Select(browser.find_element(By.ID, "f-training_ready")).select_by_visible_text("no")
    WebDriverWait(browser, 30).until(lambda b: "f.training_ready=no" in b.current_url)
    assert sorted(listed(browser)) == sorted(
        r for r, row in rows.items() if not row["training_ready"]
    )

    browser.get(export_viewer.url + "rollouts")
    browser.find_element(By.LINK_TEXT, "retries").click()
    row = rows["retries"]
    assert text(browser, "#rid") == "retries"
    assert text(browser, "#counts") == f"{len(row['steps'])} / {len(row['excluded'])}"
    steps = browser.find_elements(By.CSS_SELECTOR, "li.step")
    assert [s.get_attribute("id") for s in steps] == [
        f"x{s['exchange_index']}" for s in row["steps"]
    ]
    for exc in row["excluded"]:
        item = browser.find_element(By.ID, f"x{exc['exchange_index']}")
        assert f"excluded: {exc['reason']}" in item.text
        if exc["duplicate_of"] is not None:
            assert f"duplicate of #{exc['duplicate_of']}" in item.text
    browser.save_screenshot(str(shots / "rollout.png"))

    exc = row["excluded"][0]
    browser.find_element(By.ID, f"x{exc['exchange_index']}").find_element(
        By.LINK_TEXT, "raw"
    ).click()
    assert text(browser, "#index") == str(exc["exchange_index"])
    records = [json.loads(line) for line in Path(row["raw_log"]["path"]).read_text().splitlines()]
    wanted = {r["type"]: r for r in records if r["index"] == exc["exchange_index"]}
    assert json.loads(text(browser, "#raw-request")) == wanted["request"]
    assert json.loads(text(browser, "#raw-outcome")) == wanted["outcome"]


def test_reasoning_is_folded_and_repairs_marked(
    browser: webdriver.Chrome, export_viewer: Viewer, export_dir: Path
) -> None:
    rows = {r["rollout_id"]: r for r in read_rows(export_dir / "results.jsonl")}
    browser.get(export_viewer.url + "rollouts/reasoning")
    folded = browser.find_elements(By.CSS_SELECTOR, "details.reasoning")
    with_reasoning = [
        s for s in rows["reasoning"]["steps"] if s["response"].get("reasoning_content")
    ]
    assert len(folded) >= len(with_reasoning) > 0
    assert not any(d.get_attribute("open") for d in folded)
    first = with_reasoning[0]["response"]["reasoning_content"]
    assert not browser.find_element(By.CSS_SELECTOR, "details.reasoning pre").is_displayed()
    folded[0].find_element(By.TAG_NAME, "summary").click()
    assert first.strip() in folded[0].text

    browser.get(export_viewer.url + "rollouts/fragments")
    repair = rows["fragments"]["repairs"][0]
    assert (
        f"merged from {repair['fragments']} fragments"
        in browser.find_element(By.ID, "timeline").text
    )


def test_script_in_agent_output_stays_text(
    browser: webdriver.Chrome, export_viewer: Viewer
) -> None:
    for path in (f"rollouts/{XSS_ID}", "rollouts", ""):
        browser.get(export_viewer.url + path)
        assert browser.execute_script("return window.__xss === undefined")
    browser.get(export_viewer.url + f"rollouts/{XSS_ID}")
    page = browser.find_element(By.TAG_NAME, "body").text
    assert SCRIPT in page and "<img src=x onerror=window.__xss=2>" in page
    assert browser.find_elements(By.CSS_SELECTOR, "main script, main img") == []


def test_log_dir_files_copy_id_and_live_rollouts(
    browser: webdriver.Chrome, run_viewer: Viewer, run_dir: Path
) -> None:
    rollouts = len(list(run_dir.rglob("exchanges.jsonl")))
    browser.get(run_viewer.url)
    assert text(browser, "#n-rollouts") == str(rollouts)
    browser.get(run_viewer.url + "rollouts?per=100")
    assert len(listed(browser)) == rollouts
    browser.find_element(By.LINK_TEXT, "clean_pass").click()
    raw = browser.find_elements(By.LINK_TEXT, "raw")
    assert len(raw) == len(browser.find_elements(By.CSS_SELECTOR, "li.step, li.excluded")) > 0
    raw[-1].click()
    request = json.loads(text(browser, "#raw-request"))
    assert request["type"] == "request" and request["index"] == int(text(browser, "#index"))
    browser.back()
    browser.execute_script(
        "window.__copied = null;"
        "navigator.clipboard.writeText = async (t) => { window.__copied = t; };"
    )
    browser.find_element(By.ID, "copy-id").click()
    WebDriverWait(browser, 10).until(lambda b: b.execute_script("return window.__copied"))
    assert browser.execute_script("return window.__copied") == "clean_pass"
    browser.find_element(By.ID, "file-result").click()
    assert text(browser, "#file-text") == (run_dir / "clean_pass.result").read_text().strip()
    assert browser.execute_script("return window.__xss === undefined")

    browser.get(run_viewer.url + "rollouts?per=100")
    assert browser.find_element(By.ID, "live-note").is_displayed() is False
    xss_rollout(run_dir / "rollouts", "late_arrival")
    WebDriverWait(browser, 30).until(lambda b: b.find_element(By.ID, "live-note").is_displayed())
    browser.find_element(By.CSS_SELECTOR, "#live-note a").click()
    WebDriverWait(browser, 30).until(lambda b: "late_arrival" in listed(b))
    assert len(listed(browser)) == rollouts + 1
