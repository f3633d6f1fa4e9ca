"""Every ```bash and ```python block of README.md and docs/*.md runs here, so no
example can go stale.

The blocks of one page run in order, in one temporary directory of its own that
holds a copy of examples/ (the README's commands run from there) and the page's
`file:` blocks. `python` (and `python3`) is the interpreter running the tests,
with the pytrace_cffi under test importable. A block passes when it exits with 0.

A line right above a block's fence may say, in an HTML comment (invisible on
GitHub):
  <!-- file: NAME -->      the block is a file the page's other blocks use: it is
                           written to NAME, not run;
  <!-- needs: torch -->    the block runs only where torch imports (3.11 here),
                           and is skipped with the reason elsewhere;
  <!-- not run: WHY -->    the block cannot run here (e.g. it needs a GPU, or
                           takes minutes): WHY says so, and it is listed.
Other fences are text (```, ```text, ```json...): a shell or Python block under
another name (```sh, ```py, ```console...) fails the rules test below.
"""
import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
from collections import namedtuple

import pytest

import pytrace_cffi

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
RUN = {"bash", "python"}
TEXT = {"", "text", "json", "markdown", "c", "toml", "diff"}
MARKERS = {"file", "needs", "not run"}
NEEDS = {"torch"}
TIMEOUT = {"torch": 600}
DEFAULT_TIMEOUT = 120

Block = namedtuple("Block", "page line lang text markers")


def pages():
    docs = os.path.join(ROOT, "docs")
    names = sorted(n for n in os.listdir(docs) if n.endswith(".md")) if os.path.isdir(docs) else []
    return ["README.md"] + [f"docs/{n}" for n in names]


def read_blocks(page):
    """The fenced blocks of page, with the markers on the comment lines right
    above each fence."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        indent, lang = fence.group(1), fence.group(2)
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{page}:{i + 1}: a fence that is never closed"
        markers, k = {}, i - 1
        while k >= 0:
            comment = re.match(r"^\s*<!--\s*(.*?)\s*-->\s*$", lines[k])
            if not comment:
                break
            key, _, value = comment.group(1).partition(":")
            markers[key.strip()] = value.strip()
            k -= 1
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in lines[i + 1:end])
        found.append(Block(page, i + 1, lang, textwrap.dedent(body) + "\n", markers))
        i = end + 1
    return found


ALL = [block for page in pages() for block in read_blocks(page)]
RUNNABLE = [b for b in ALL if b.lang in RUN and "file" not in b.markers]


def _installs(block):
    """Whether block would install into the interpreter running the tests."""
    return re.search(r"\bpip3?\s+install\b|-m\s+pip\b", block.text) is not None


def _block_id(block):
    return f"{block.page}:{block.line}"


def _torch_imports():
    try:
        __import__("torch")
    except Exception:           # noqa: BLE001 - absent or broken: the same here
        return False
    return True


class PageDirs:
    """One working directory per page, and which of its blocks already ran
    there (a block selected alone runs the page's earlier blocks first)."""

    def __init__(self, base):
        self.base, self.dirs, self.done = base, {}, {}
        self.bin = os.path.join(base, "bin")
        os.makedirs(self.bin)
        for name in ("python", "python3"):
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
            os.chmod(path, 0o755)

    def env(self):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PYTRACE_CFFI") and k != "PYTHONSTARTUP"}
        # The interpreter's own bin first (torchrun, pip beside it), our shims before it.
        env["PATH"] = os.pathsep.join([self.bin, os.path.dirname(sys.executable),
                                       env.get("PATH", "")])
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))
        installed = set(site.getsitepackages() + [site.getusersitepackages()])
        if package_root not in installed:       # the source tree under test
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in [package_root, env.get("PYTHONPATH", "")] if p)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def dir_for(self, page):
        if page not in self.dirs:
            where = os.path.join(self.base, page.replace("/", "_").replace(".", "_"))
            shutil.copytree(EXAMPLES, where,
                            ignore=shutil.ignore_patterns("*.html", "*.json", "__pycache__"))
            for block in read_blocks(page):
                if "file" in block.markers:
                    with open(os.path.join(where, block.markers["file"]), "w") as f:
                        f.write(block.text)
            self.dirs[page], self.done[page] = where, set()
        return self.dirs[page]

    def run(self, block):
        """Runs block (after the page's earlier blocks not run yet); returns
        None, or why it was skipped."""
        where = self.dir_for(block.page)
        for earlier in RUNNABLE:
            if earlier.page == block.page and earlier.line < block.line \
                    and earlier.line not in self.done[block.page]:
                self._run_one(earlier, where)
        return self._run_one(block, where)

    def _run_one(self, block, where):
        self.done[block.page].add(block.line)
        if "not run" in block.markers:
            return f"not run: {block.markers['not run']}"
        assert not _installs(block), f"{_block_id(block)} installs packages: mark it not run"
        need = block.markers.get("needs")
        if need == "torch" and not _torch_imports():
            return f"needs torch, which does not import on Python {sys.version.split()[0]}"
        script = os.path.join(where, f"_block_{block.line}.{'py' if block.lang == 'python' else 'sh'}")
        with open(script, "w") as f:
            f.write(block.text)
        command = ([sys.executable, script] if block.lang == "python"
                   else ["bash", "-e", "-o", "pipefail", script])
        proc = subprocess.run(command, cwd=where, env=self.env(), capture_output=True,
                              text=True, timeout=TIMEOUT.get(need, DEFAULT_TIMEOUT))
        assert proc.returncode == 0, (
            f"{_block_id(block)} exited with {proc.returncode}\n--- block:\n{block.text}"
            f"--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}")
        return None


@pytest.fixture(scope="module")
def page_dirs(tmp_path_factory):
    return PageDirs(str(tmp_path_factory.mktemp("docs")))


@pytest.mark.parametrize("block", RUNNABLE, ids=_block_id)
def test_example_runs(block, page_dirs):
    skipped = page_dirs.run(block)
    if skipped:
        pytest.skip(skipped)


def test_every_block_runs_or_says_why():
    """Shell and Python blocks are ```bash or ```python (so they run); a marker is
    one of the known ones, right above its fence; a block left out says why."""
    problems = []
    for block in ALL:
        where = _block_id(block)
        if block.lang not in RUN | TEXT:
            problems.append(f"{where}: ```{block.lang}: name shell blocks bash, Python "
                            "blocks python (they run), anything else text")
        for key in set(block.markers) - MARKERS:
            problems.append(f"{where}: unknown marker {key!r} (known: {sorted(MARKERS)})")
        if block.markers and block.lang not in RUN:
            problems.append(f"{where}: a marker on a text block")
        if "not run" in block.markers and len(block.markers["not run"].split()) < 3:
            problems.append(f"{where}: `not run:` must say why")
        if block.lang in RUN and "not run" not in block.markers and _installs(block):
            problems.append(f"{where}: installs packages: mark it `not run:` (the tests "
                            "must not change the interpreter they run in)")
        if block.markers.get("needs", "torch") not in NEEDS:
            problems.append(f"{where}: needs {block.markers['needs']!r} (known: {NEEDS})")
    for page in pages():
        names = [b.markers["file"] for b in ALL if b.page == page and "file" in b.markers]
        if len(names) != len(set(names)):
            problems.append(f"{page}: two file blocks of one name: {sorted(names)}")
    assert not problems, "\n".join(problems)
    assert len([b for b in ALL if "not run" in b.markers]) <= 6, \
        "most examples must run: " + ", ".join(_block_id(b) for b in ALL
                                               if "not run" in b.markers)


def _slug(heading):
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_pages_resolve():
    """Relative links ([x](docs/API.md#calls), [y](#recipes)) name files that
    exist and headings that are there."""
    problems = []
    for page in pages() + ["benchmarks/README.md"]:
        path = os.path.join(ROOT, page)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            if not os.path.exists(linked):
                problems.append(f"{page}: {target}: no such file")
                continue
            if anchor and linked.endswith(".md"):
                with open(linked, encoding="utf-8") as f:
                    slugs = {_slug(h) for h in re.findall(r"^#+\s+(.*)$", f.read(), re.M)}
                if anchor not in slugs:
                    problems.append(f"{page}: {target}: no such heading")
    assert not problems, "\n".join(problems)


def test_the_readme_is_short_and_starts_with_the_ci_commands():
    """At most 250 lines; its first block gives the two commands .ci/run runs:
    install and trace the bundled example, then the tests."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert len(readme.splitlines()) <= 250
    first = ALL[0]
    assert first.page == "README.md" and first.lang == "bash" and first.line <= 5
    commands = [line.split("#")[0].strip() for line in first.text.splitlines()]
    assert commands == ["pip install . && cd examples && python -m pytrace_cffi run -o "
                        "demo.html demo.py", "bash tests/run_all.sh"]
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert f'echo "== example: {commands[0]}"' in ci
    assert '"$venv/bin/python" -m pip install -q .' in ci
    assert '(cd examples && "$venv/bin/python" -m pytrace_cffi run -o' in ci and "demo.py)" in ci
    assert re.search(r"^bash tests/run_all\.sh", ci, re.M)
