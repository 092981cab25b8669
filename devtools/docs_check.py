"""The built docs site (`make docs`: mkdocs into site/) checked as a reader's browser shows it:
every page served over loopback HTTP and loaded in Debian's headless Chromium (driven by
Playwright, which downloads no browser of its own here), each must render its title heading and
main text with no script error and no failed request, and every link between pages, anchors
included, must land on a page and element that exist.

    python -m devtools.docs_check site
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urldefrag

from playwright.sync_api import Page, Request, Response, sync_playwright

# Debian's chromium package; the flags keep it off the network this machine does not have
# (without them it tries Google's hosts at every start and logs refused connections).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
PAGE_TIMEOUT_MS = 30_000
# What a page rendered: its first heading's and body's text as laid out (innerText is what
# is visible, not the markup), its links resolved by the browser, and its elements' ids.
RENDERED = """() => ({
    heading: (document.querySelector("h1") || {innerText: ""}).innerText.trim(),
    text: document.body.innerText.length,
    hrefs: Array.from(document.querySelectorAll("a[href]"), a => a.href),
    ids: Array.from(document.querySelectorAll("[id]"), n => n.id),
})"""  # two busy cores: a page is ~50 KB of local files


@dataclass
class Findings:
    pages: int = 0
    links: int = 0
    problems: list[str] = field(default_factory=list)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A page the browser stops loading (it moved on to the next) resets its connection:
        not a problem of the site, so no traceback on the check's output."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _check_page(
    page: Page, errors: list[str], url: str, base: str, found: Findings
) -> tuple[list[str], set[str]]:
    """Load one page; its problems go to `found`; returns its same-site links and the ids of
    its elements (the anchors a link may name)."""
    errors.clear()
    answer = page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
    if answer is None or answer.status != 200:
        found.problems.append(f"{url}: HTTP {answer.status if answer else 'no answer'}")
        return [], set()
    # One round trip to the browser for what the page rendered (each query is one otherwise).
    shown = page.evaluate(RENDERED)
    if not shown["heading"]:
        errors.append("no rendered title heading")
    if shown["text"] < 200:
        errors.append(f"renders only {shown['text']} characters")
    found.problems.extend(f"{url}: {error}" for error in errors)
    hrefs: list[str] = shown["hrefs"]
    ids: list[str] = shown["ids"]
    return [href for href in hrefs if href.startswith(base)], set(ids)


def _failed(request: Request, errors: list[str]) -> None:
    # Leaving a page aborts what it still loads after its load event (the search index):
    # the next page's check, not a failure of the site.
    if request.failure != "net::ERR_ABORTED":
        errors.append(f"request failed: {request.url} ({request.failure})")


def _answered(answer: Response, errors: list[str]) -> None:
    if answer.status >= 400:  # a missing stylesheet, script or image of the page
        errors.append(f"HTTP {answer.status}: {answer.url}")


def check_site(site: Path) -> Findings:
    found = Findings()
    server, base = _serve(site)
    try:
        with sync_playwright() as driver:
            browser = driver.chromium.launch(
                executable_path=CHROMIUM, args=list(CHROMIUM_FLAGS), headless=True
            )
            # One tab for every page (a new one costs ~1 s on two busy cores); its listeners
            # write into `errors`, which each page's check empties first.
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(f"script error: {error}"))
            page.on("requestfailed", lambda req: _failed(req, errors))
            page.on("response", lambda answer: _answered(answer, errors))
            links: dict[str, str] = {}
            anchors: dict[str, set[str]] = {}
            for html in sorted(site.rglob("*.html")):
                if html.name == "404.html":
                    continue
                url = base + html.relative_to(site).as_posix()
                found.pages += 1
                page_links, anchors[url] = _check_page(page, errors, url, base, found)
                for link in page_links:
                    links.setdefault(link, url)
            browser.close()
    finally:
        server.shutdown()
    for link, source in sorted(links.items()):
        found.links += 1
        target, anchor = urldefrag(link)
        if target.endswith("/"):
            target += "index.html"
        if target not in anchors:
            found.problems.append(f"{source}: broken link {link}")
        elif anchor and anchor not in anchors[target]:
            found.problems.append(f"{source}: no #{anchor} in {target}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the built site (mkdocs' site_dir)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        print(f"no {CHROMIUM}: apt-get install chromium (make docs does as root)", file=sys.stderr)
        return 1
    found = check_site(args.site)
    for problem in found.problems:
        print(problem, file=sys.stderr)
    print(
        f"docs: {found.pages} pages rendered in Chromium, {found.links} links followed, "
        f"{len(found.problems)} problems"
    )
    return 1 if found.problems or found.pages == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
