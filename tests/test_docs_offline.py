"""The manual works offline, as a reader opens it: every page of the built site loaded from
``file://`` in headless Chromium with the network blocked makes no request that fails (no
outside font, CDN or script), logs no error, and holds no code block wider than its column
at 1,280 px; long pages have headings (a table of contents)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser import DevTools, chromium

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1280
# what a page's code blocks and tables may not exceed: their column's right edge
OVERFLOW = """(() => {
  const col = document.querySelector('.md-content__inner').getBoundingClientRect();
  return [...document.querySelectorAll('.md-typeset pre > code')]
    .filter(c => c.scrollWidth > c.clientWidth + 1 || c.getBoundingClientRect().right > col.right + 1)
    .map(c => c.textContent.split('\\n')[0].slice(0, 80));
})()"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow
@pytest.mark.browser
def test_every_page_loads_offline_with_no_failed_request_and_no_code_wider_than_its_column(site, tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium on this machine: apt-get install chromium (scripts/setup.sh installs it)")
    pages = sorted(p for p in site.rglob("*.html") if p.name != "404.html")
    assert len(pages) >= 20, pages
    cdp = DevTools(binary, tmp_path / "profile")
    problems: dict[str, list] = {}
    try:
        target = cdp.call("Target.createTarget", url="about:blank")["targetId"]
        session = cdp.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            cdp.call(f"{domain}.enable", session)
        # the network off (file:// and data: still load); any request for an outside host is caught below
        cdp.call("Network.emulateNetworkConditions", session, offline=True, latency=0, downloadThroughput=-1,
                 uploadThroughput=-1)
        cdp.call("Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=900, deviceScaleFactor=1,
                 mobile=False)
        for page in pages:
            cdp.events.clear()
            cdp.call("Page.navigate", session, url=page.as_uri())
            cdp.wait_for("Page.loadEventFired")
            wide = cdp.call("Runtime.evaluate", session, expression=OVERFLOW, returnByValue=True)["result"]["value"]
            events = list(cdp.events)
            urls = {e["params"]["requestId"]: e["params"]["request"]["url"] for e in events
                    if e.get("method") == "Network.requestWillBeSent"}
            failed = [(urls.get(e["params"]["requestId"]), e["params"].get("errorText"),
                       e["params"].get("blockedReason")) for e in events if e.get("method") == "Network.loadingFailed"]
            outside = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"
                       and not e["params"]["request"]["url"].startswith(("file://", "data:", "blob:"))]
            errors = [e["params"]["entry"]["text"] for e in events if e.get("method") == "Log.entryAdded"
                      and e["params"]["entry"]["level"] == "error"]
            errors += [e["params"]["exceptionDetails"]["text"] for e in events
                       if e.get("method") == "Runtime.exceptionThrown"]
            if failed or outside or errors or wide:
                problems[str(page.relative_to(site))] = [failed, outside, errors, wide]
    finally:
        cdp.close()
    assert problems == {}, problems


def _words_under_headings(text: str) -> list[int]:
    # prose only: code blocks and table rows (a table is read by its rows, not its words) left out
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|"))
    sections = re.split(r"^#{2,3} ", text, flags=re.M)
    return [len(s.split()) for s in sections]


@pytest.mark.parametrize("page", sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")))
def test_a_long_page_has_headings_and_no_section_of_over_1200_words_of_prose(page):
    text = (ROOT / "docs" / page).read_text()
    words = _words_under_headings(text)
    if sum(words) > 600:
        assert len(words) > 1, f"docs/{page}: {sum(words)} words and no heading (its table of contents is empty)"
    assert max(words) <= 1200, f"docs/{page}: a section of {max(words)} words; give it headings"
