"""The debug UI's files as shipped: self-contained, and never parsing data as HTML."""

from __future__ import annotations

import re
from pathlib import Path

import knarr.debug

STATIC = Path(knarr.debug.__file__).parent / "static"
SCRIPTS = sorted(STATIC.rglob("*.js"))
PAGES = [STATIC / "index.html", STATIC / "app.css", *SCRIPTS]


def code_of(path: Path) -> str:
    """The file without its // comments (which may name what the code avoids)."""
    return re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)


def test_the_ui_is_an_index_page_a_stylesheet_and_javascript_modules_installed_with_the_package():
    assert (STATIC / "index.html").is_file() and (STATIC / "app.css").is_file() and (STATIC / "app.js").is_file()
    assert len(SCRIPTS) >= 10, SCRIPTS  # app, api, dom and one module per view


def test_no_script_parses_text_as_html_or_code():
    sinks = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|srcdoc")
    found = [f"{p.relative_to(STATIC)}: {m.group(0)}" for p in SCRIPTS for m in sinks.finditer(code_of(p))]
    assert not found, found


def test_nothing_is_loaded_from_another_host():
    remote = re.compile(r"""(?:src|href|url\(|import|from)\s*=?\s*["'(]?\s*(?:https?:)?//""", re.I)
    found = [f"{p.relative_to(STATIC)}: {m.group(0)}" for p in PAGES for m in remote.finditer(code_of(p))]
    assert not found, found


def test_every_module_the_page_imports_exists():
    for script in SCRIPTS:
        for target in re.findall(r"""from\s+["'](\.[^"']+)["']""", script.read_text()):
            assert (script.parent / target).resolve().is_file(), f"{script.relative_to(STATIC)} imports missing {target}"


def test_the_page_forbids_inline_scripts_and_foreign_origins():
    page = (STATIC / "index.html").read_text()
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', page)
    assert policy, "index.html carries no Content-Security-Policy"
    assert "script-src 'self'" in policy.group(1) and "default-src 'self'" in policy.group(1)
    assert "unsafe-inline" not in policy.group(1) and "unsafe-eval" not in policy.group(1)
    assert '<meta name="referrer" content="no-referrer">' in page  # a ?token= never leaks to a linked site
