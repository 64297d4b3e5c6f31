"""The HTML report (`deployc build --report`, `deployc report`): one self-contained file, loaded in a real
browser (Debian's headless Chromium): its charts render (the DOM and a screenshot), and the page makes
no network request."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.projects import REPO, Built, run_subprocess

CHROMIUM = shutil.which("chromium")
# What the browser does on its own (updates, accounts) is initiated by no page: "not an origin".
QUIET = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions"]
# DEPLOYC_UPDATE_SCREENSHOT=1 copies the report's screenshot to where the README shows it.
SCREENSHOT = REPO / "docs" / "images" / "report.png"


def _browser(page: Path, tmp: Path, *extra: str) -> tuple[str, list[dict]]:
    """(the DOM Chromium built from the page, the requests the page started), from a net log."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed (`make test` installs Debian's chromium)")
    log = tmp / "net.json"
    proc = subprocess.run([CHROMIUM, *QUIET, f"--log-net-log={log}", *extra, "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json.loads(log.read_text())
    names = {v: k for k, v in events["constants"]["logEventTypes"].items()}
    started = [e.get("params", {}) for e in events["events"] if names[e["type"]] == "URL_REQUEST_START_JOB"]
    # A job's begin event names its initiator (its end event only the outcome).
    return proc.stdout, [p for p in started if "initiator" in p and p["initiator"] != "not an origin"]


def _screenshot(page: Path, tmp: Path) -> Path:
    shot = tmp / "shot.png"
    subprocess.run([CHROMIUM or "chromium", *QUIET, "--window-size=1100,1400", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True, env={**os.environ, "HOME": str(tmp)})
    return shot


def _colours(shot: Path) -> set[tuple[int, int, int]]:
    from PIL import Image

    with Image.open(shot) as image:
        return {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 20)}


def test_the_build_report_renders_in_a_browser_without_a_request(chosen: Built, tmp_path: Path) -> None:
    page = chosen.folder.parent / "report.html"
    text = page.read_text()
    assert not re.search(r"https?://|\bsrc=|\bhref=|url\(|<script", text)  # nothing it could fetch
    dom, requests = _browser(page, tmp_path)
    assert requests == []
    assert dom.count('class="chart bytes"') == 1 and dom.count('class="bar"') >= 2
    assert dom.count('class="chart candidates"') == 2  # both models chose by measurement
    assert re.search(r'class="point" data-status="chosen"', dom) and 'data-status="failed"' in dom
    assert "8da8w (chosen)" in dom and "fp32: not-tried" in dom
    shot = _screenshot(page, tmp_path)
    colours = _colours(shot)
    assert len(colours) > 50  # text, tables and charts, not a blank page
    assert (0x2B, 0x6C, 0xB0) in colours and (0x2F, 0x85, 0x5A) in colours  # quantized-weight bars, the chosen point
    if os.environ.get("DEPLOYC_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def test_the_check_sees_a_page_that_fetches(tmp_path: Path) -> None:
    """The request check is not vacuous: a page that loads an image from a server is caught."""
    page = tmp_path / "fetching.html"
    page.write_text('<html><body><img src="http://127.0.0.1:9/x.png"></body></html>')
    _, requests = _browser(page, tmp_path)
    assert len(requests) == 1


def test_deployc_report_of_a_bundle_with_a_pipeline_and_a_profile(rag: Path, tmp_path: Path) -> None:
    out = tmp_path / "rag.html"
    r = run_subprocess("report", str(rag / "arduino_q"), "--out", str(out), "--profile", "--runs", "3")
    assert r.code == 0, r.err[-2000:]
    dom, requests = _browser(out, tmp_path)
    assert requests == []
    assert dom.count('class="chart pipeline"') == 1
    for stage in ("query_tokens", "query_embedding", "retrieve", "prompt", "answer"):
        assert f">{stage}<" in dom
    assert dom.count('class="chart operators"') >= 2  # the embedder's and the decoder's operator times
    assert "host numbers" in dom
    assert "gguf" in dom  # rag_offline's LLM on the CPU: the GGUF file's own blocks
    assert len(_colours(_screenshot(out, tmp_path))) > 50


def test_report_of_a_damaged_bundle_refuses(chosen: Built, tmp_path: Path) -> None:
    copy = tmp_path / "b"
    shutil.copytree(chosen.bundle("arduino_q"), copy)
    (copy / "small.pte").write_bytes(b"not a program")
    r = run_subprocess("report", str(copy), "--out", str(tmp_path / "r.html"))
    assert r.code == 1 and "mismatch(es) against bundle.lock.json; no report" in r.err
    assert not (tmp_path / "r.html").exists()
