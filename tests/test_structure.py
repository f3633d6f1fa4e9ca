"""The package's structure (issue 21): read from the source with `ast`, never by
importing it. Every `import` and `from ... import` counts, at module level and
inside functions alike; relative imports are resolved; `import pytrace_cffi` or
`from . import start` in a submodule is an arrow to the package's __init__ (which
imports much). The parent packages Python runs before a submodule (importing
pytrace_cffi.model.walk runs pytrace_cffi/render/__init__.py first) are not
arrows: every module would then depend on the package's __init__. Imports made
from computed strings (importlib.import_module(f"...")) are not seen: the
package names its imports in import statements.

Rules:
- no import circle among the package's modules;
- no module over 700 lines;
- only the command line (__main__, a cli package, cli_* modules) imports the
  command line;
- nothing under render/ imports process code (processes, follow/), the command
  line, or formats.py (a writer gets its options as arguments);
- the recorder imports no writer and the model (model/: the trace, the walk,
  the saved format) none of
  the recorder's, the writers' or the command line's modules: record -> model ->
  render;
- nothing inside the package imports a compatibility shim (SHIMS);
- only formats.py looks at a file's suffix to choose a format, or asks which
  format a name is (is_pftrace, gzipped, a format's name compared): elsewhere
  code asks the row's capability columns (formats.of(path).live, ...).
"""
import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "pytrace_cffi"
PACKAGE_DIR = os.path.join(os.path.dirname(HERE), PACKAGE)
MAX_LINES = 700

# Old paths that only re-export names the README documents (from below them).
SHIMS = {"pytrace_cffi.summary", "pytrace_cffi.html"}
# The recorder (record side): sessions, hiding rules, what a stopped session becomes.
RECORD = {"pytrace_cffi._tracer", "pytrace_cffi._stopped", "pytrace_cffi._hiding",
          "pytrace_cffi.options", "pytrace_cffi._clock", "pytrace_cffi.annotations",
          "pytrace_cffi._names"}
# The one module that chooses a format from a file's suffix.
FORMATS_MODULE = "pytrace_cffi.formats"
FORMAT_SUFFIXES = {".json", ".json.gz", ".gz", ".pftrace", ".perfetto-trace", ".html"}
# What asks which format a name is: only formats.py calls these or compares a
# format's name (fmt.name == "pftrace"); elsewhere a capability column answers.
FORMAT_NAME_TESTS = {"is_pftrace", "gzipped", "is_chrome_json"}
FORMAT_NAMES = {"json", "json.gz", "pftrace", "html", "speedscope", "folded", "pprof",
                "directory", "dir"}


def _module_files():
    """module name -> path (.py), and the names of compiled modules: _core (cffi's,
    made by build_ffi.py: known whether built here or not) and any other found."""
    modules, compiled = {}, {f"{PACKAGE}._core"}
    for top, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = os.path.join(top, name)
            parts = os.path.relpath(path, os.path.dirname(PACKAGE_DIR)).split(os.sep)
            if name.endswith(".py"):
                parts[-1] = name[:-3]
                if parts[-1] == "__init__":
                    parts.pop()
                modules[".".join(parts)] = path
            elif name.endswith((".so", ".pyd")):
                parts[-1] = name.split(".")[0]
                compiled.add(".".join(parts))
    return modules, compiled


MODULES, COMPILED = _module_files()
# The model (model/): the trace as data, its one batch stream, the saved format.
MODEL = {name for name in MODULES if name == "pytrace_cffi.model"
         or name.startswith("pytrace_cffi.model.")}
KNOWN = set(MODULES) | COMPILED
TREES = {name: ast.parse(open(path, encoding="utf-8").read(), path)
         for name, path in MODULES.items()}


def _known(name):
    """The module an imported dotted name lands in: itself, else its nearest parent
    (`from .model.trace import Trace` -> pytrace_cffi.model.trace)."""
    while name and name not in KNOWN:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module, node):
    """The package's modules an import node reaches."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            is_package = MODULES[module].endswith("__init__.py")
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in KNOWN else target
                 for alias in node.names]
    found = []
    for name in names:
        if name == PACKAGE or name.startswith(PACKAGE + "."):
            landed = _known(name)
            if landed and landed != module:
                found.append(landed)
    return found


def _imports():
    """module -> {imported module: first line importing it}."""
    edges = {name: {} for name in MODULES}
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    edges[module].setdefault(target, node.lineno)
    return edges


EDGES = _imports()


def _where(module, target):
    return f"{module} imports {target} (line {EDGES[module][target]})"


def _circles():
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(EDGES.get(node, ())):
            if other not in EDGES:
                continue        # a compiled module imports nothing of ours
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(EDGES):
        if node not in index:
            visit(node)
    return found


def _one_cycle(component):
    """A shortest import cycle through the first module of a circle, as words."""
    start = component[0]
    members = set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for other in sorted(EDGES[node]):
            if other == start:
                path = paths[node] + [start]
                return "; ".join(_where(a, b) for a, b in zip(path, path[1:]))
            if other in members and other not in paths:
                paths[other] = paths[node] + [other]
                queue.append(other)
    return "?"


def _under(module, package):
    return module == package or module.startswith(package + ".")


def _is_cli(module):
    last = module.rpartition(".")[2]
    return (module == f"{PACKAGE}.__main__" or _under(module, f"{PACKAGE}.cli")
            or last.startswith("cli_"))


def test_the_graph_sees_the_package():
    """The reading itself: imports inside functions, relative ones, the package's
    __init__ and the compiled core are all seen (the rest rests on this)."""
    assert f"{PACKAGE}._tracer" in EDGES[PACKAGE]                      # from ._tracer import
    assert f"{PACKAGE}.model.walk" in EDGES[f"{PACKAGE}.model.trace"]     # inside a method
    assert f"{PACKAGE}._core" in EDGES[f"{PACKAGE}.model.trace"]          # from .._core import lib
    assert f"{PACKAGE}.model.trace" in EDGES[f"{PACKAGE}._stopped"]


def test_no_import_circle():
    circles = _circles()
    assert not circles, "import circles (imports inside functions count):\n" + "\n".join(
        f"- {len(c)} modules: {', '.join(c)}\n  e.g. {_one_cycle(c)}" for c in circles)


def test_no_module_over_700_lines():
    long = sorted((sum(1 for _ in open(path, encoding="utf-8")), name)
                  for name, path in MODULES.items())
    over = [f"{name}: {n} lines" for n, name in long if n > MAX_LINES]
    assert not over, f"modules over {MAX_LINES} lines (split them by concern): {over}"


def test_only_the_command_line_imports_the_command_line():
    wrong = [_where(module, target) for module in sorted(EDGES) if not _is_cli(module)
             for target in sorted(EDGES[module]) if _is_cli(target)]
    assert not wrong, "library modules importing the command line: " + "; ".join(wrong)


def test_renderers_import_no_process_cli_or_format_code():
    def forbidden(target):
        return (_under(target, f"{PACKAGE}.processes") or _under(target, f"{PACKAGE}.follow")
                or _is_cli(target) or target == FORMATS_MODULE)
    wrong = [_where(module, target) for module in sorted(EDGES)
             if _under(module, f"{PACKAGE}.render")
             for target in sorted(EDGES[module]) if forbidden(target)]
    assert not wrong, ("render/ must depend on the model only (process code, the command "
                       "line and formats.py are above it): " + "; ".join(wrong))


def _is_writer(module):
    return _under(module, f"{PACKAGE}.render")


def test_record_then_model_then_render():
    wrong = [_where(module, target) for module in sorted(RECORD & set(EDGES))
             for target in sorted(EDGES[module]) if _is_writer(target)]
    wrong += [_where(module, target) for module in sorted(MODEL)
              for target in sorted(EDGES[module])
              if target in RECORD or _is_writer(target) or _is_cli(target)
              or target == PACKAGE or _under(target, f"{PACKAGE}.processes")
              or _under(target, f"{PACKAGE}.follow")]
    assert not wrong, ("imports against record -> model -> render (the recorder imports no "
                       "writer; the model neither the recorder nor a writer): "
                       + "; ".join(wrong))


def _empty_tables(tree):
    """(line, name) of each name bound at module level to an empty dict or list: a
    registry that other modules fill."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and (
                (isinstance(node.value, ast.Dict) and not node.value.keys)
                or (isinstance(node.value, ast.List) and not node.value.elts)):
            found += [(node.lineno, t.id) for t in node.targets if isinstance(t, ast.Name)]
    return found


def test_the_model_has_no_registry_filled_from_outside():
    """Trace's writers are named by formats.FORMATS ("module:function"), not put
    into a table of the model's by the package's __init__ (issue 32)."""
    wrong = [f"{module} line {line}: {name}" for module in sorted(MODEL)
             for line, name in _empty_tables(TREES[module])]
    assert not wrong, ("the model holds an empty table for other modules to fill (name "
                       "what it needs where it is chosen, e.g. formats.FORMATS): "
                       + "; ".join(wrong))
    assert _empty_tables(ast.parse("A = {}\nB = {1: 2}\nC = []\nD = dict()")) == [
        (1, "A"), (3, "C")]


def test_nothing_inside_imports_a_shim():
    assert SHIMS <= set(MODULES), sorted(SHIMS - set(MODULES))
    wrong = [_where(module, target) for module in sorted(EDGES) if module not in SHIMS
             for target in sorted(EDGES[module]) if target in SHIMS]
    assert not wrong, "shims are for users only: " + "; ".join(wrong)
    for shim in SHIMS:          # a shim only re-exports: a docstring, imports, __all__
        for node in TREES[shim].body:
            assert isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign)), (
                f"{shim} line {node.lineno}: a shim holds no code")


# Suffix tests that choose no format, by module: what they test instead.
NOT_FORMAT_CHOICES = {
    # (none today; e.g. a name's ".json" in a test for "meta.json" would be listed
    # here with why)
}


def _suffix_literals(node):
    """The format suffixes among node's string constants (a str, or a tuple of them)."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            and v.value.lower() in FORMAT_SUFFIXES]


def _is_splitext(node):
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "attr", getattr(node.value.func, "id", None))
            == "splitext")


def test_only_formats_py_chooses_a_format_by_suffix():
    found = []
    for module, tree in sorted(TREES.items()):
        if module == FORMATS_MODULE:
            continue
        for node in ast.walk(tree):
            suffixes = []
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "endswith" and node.args):
                suffixes = _suffix_literals(node.args[0])
            elif isinstance(node, ast.Compare) and (
                    _is_splitext(node.left) or any(map(_is_splitext, node.comparators))):
                for side in [node.left, *node.comparators]:
                    suffixes += _suffix_literals(side)
            if suffixes and (module, tuple(suffixes)) not in NOT_FORMAT_CHOICES:
                found.append(f"{module} line {node.lineno}: {', '.join(suffixes)}")
    assert not found, ("a suffix chooses a format outside formats.py (ask formats.find / "
                       "formats.format_of instead): " + "; ".join(found))


def test_the_suffix_check_sees_what_it_should():
    """The check above, on made-up code: suffix tests found, other endswith not."""
    def hits(code):
        tree = ast.parse(code)
        return [s for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "endswith"
                for s in _suffix_literals(node.args[0])]
    assert hits('p.endswith(".json")') == [".json"]
    assert hits('p.lower().endswith((".json.gz", ".HTML"))') == [".json.gz", ".HTML"]
    assert hits('n.endswith(".__main__"); b.endswith(b",")') == []
    compare = ast.parse('os.path.splitext(p)[1] == ".pftrace"').body[0].value
    assert _is_splitext(compare.left) and _suffix_literals(compare.comparators[0])


def _format_names(node):
    """The format names among node's string constants (a str, or a tuple of them)."""
    values = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)
            and v.value in FORMAT_NAMES]


def _is_name_of(node):
    """x.name, or getattr(x, "name", ...)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "name"
    return (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and node.args[1].value == "name")


def _format_name_tests(tree):
    """(line, what) of each test of which format a name is in tree."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = getattr(node.func, "attr", getattr(node.func, "id", None))
            if called in FORMAT_NAME_TESTS:
                found.append((node.lineno, f"{called}()"))
        elif isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"imports {a.name}") for a in node.names
                      if a.name in FORMAT_NAME_TESTS]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(map(_is_name_of, sides)):
                found += [(node.lineno, repr(name)) for side in sides
                          for name in _format_names(side)]
    return found


def test_only_formats_py_asks_which_format_a_name_is():
    found = [f"{module} line {line}: {what}" for module, tree in sorted(TREES.items())
             if module != FORMATS_MODULE for line, what in _format_name_tests(tree)]
    assert not found, ("code outside formats.py tests a format by name (ask the row's "
                       "capability instead: formats.of(path).live, .joinable, .gzip, "
                       ".torch_merge): " + "; ".join(found))


def test_the_format_name_check_sees_what_it_should():
    """The check above, on made-up code: name tests found, other names not."""
    def hits(code):
        return [what for _, what in _format_name_tests(ast.parse(code))]
    assert hits("formats.is_pftrace(p)") == ["is_pftrace()"]
    assert hits("from .formats import gzipped") == ["imports gzipped"]
    assert hits('getattr(find(p), "name", None) == "pftrace"') == ["'pftrace'"]
    assert hits('fmt.name not in ("json", "html")') == ["'json'", "'html'"]
    assert hits('kind == "json"; thread.name == "MainThread"; fmt.live') == []


def _session_probes(tree):
    """(line, code) of each getattr/hasattr on a session (session, self.session,
    _running.session, ...) in tree."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr",
                                                                              "hasattr")
                and node.args):
            target = node.args[0]
            name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
            if name.endswith("session"):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_a_session_is_read_plainly():
    """What the package asks of a session is declared once, with its default
    (_session_base.SessionBase, which every session class derives from), and read
    as session.name, never probed with getattr (issue 32)."""
    found = [f"{module} line {line}: {code}" for module, tree in sorted(TREES.items())
             for line, code in _session_probes(tree)]
    assert not found, ("a session probed by getattr (declare the attribute and its "
                       "default in _session_base.SessionBase): " + "; ".join(found))
    code = ('getattr(session, "job_dir", None); getattr(_running.session, "flight", None)\n'
            'hasattr(self.session, "x"); getattr(result, "written", True)')
    assert [line for line, _ in _session_probes(ast.parse(code))] == [1, 1, 2]
