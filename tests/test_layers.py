"""The house's layers, one folder each, written down once and checked by reading every module's imports (ast).

    layer 1  numpy/pandas only      petri/core, petri/measure, petri/stats (scipy / statsmodels too)
    layer 2  engines                petri/engine  (the only place torch, mlx or transformers is imported;
                                    elsewhere only as type hints under TYPE_CHECKING)
    layer 3  study and runs         petri/study, petri/runs
    layer 4  the application        petri/app (service and its jobs)
    layer 5  edges                  petri/web, petri/cli, petri/__main__.py

A folder is a layer: no module lies loose in ``petri/`` but ``__main__``. A module may import from its
own layer or below, never above, and inside a layer only down its ``ORDER_IN_LAYER`` (the command
line runs the web server, never the other way); the module graph has no circle (lazy imports inside functions count,
and so do imports under ``if TYPE_CHECKING:``: a type-only circle is still two modules that each need
the other). Library files stay under 500 lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "petri"

LAYERS: dict[str, int] = {
    "petri.core": 1,
    "petri.measure": 1,
    "petri.stats": 1,
    "petri.engine": 2,
    "petri.study": 3,
    "petri.runs": 3,
    "petri.app": 4,
    "petri.web": 5,
    "petri.cli": 5,
    "petri.__main__": 5,
}
#: inside one layer, which package may import which: a package imports those ranked below it
#: (``petri.core`` below ``petri.measure``; the web edge below the command line, which serves it)
ORDER_IN_LAYER: dict[str, int] = {
    "petri.core": 0, "petri.measure": 1, "petri.stats": 1,
    "petri.runs": 0, "petri.study": 1,
    "petri.web": 0, "petri.cli": 1, "petri.__main__": 2,
}
HEAVY = ("torch", "mlx", "transformers")
MAX_LINES = 500
#: modules a folder of petri/ may hold (``__init__.py`` not counted); more get a sub-package named for what they hold
MAX_MODULES = 15


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    """The layer of ``module`` (the longest matching prefix in LAYERS); None for ``petri`` itself."""
    matches = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return LAYERS[max(matches, key=len)] if matches else None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path) -> list[tuple[str, bool]]:
    """Every module ``path`` imports, as (dotted name, runs at run time). ``from petri.x import y``
    counts as ``petri.x.y`` when that is a module, else ``petri.x``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, runtime: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, runtime)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, runtime) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / Path(*candidate.split("."))).with_suffix(".py").exists() or (
                    PACKAGE.parent / Path(*candidate.split(".")) / "__init__.py"
                ).exists()
                found.append((candidate if is_module else base, runtime))
        for child in ast.iter_child_nodes(node):
            visit(child, runtime)

    visit(tree, True)
    return found


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    unplaced = [m for m in all_modules() if m != "petri" and layer_of(m) is None]
    assert not unplaced, f"modules with no layer in LAYERS: {unplaced}"


def test_a_layer_is_a_folder():
    """Every entry of LAYERS but ``__main__`` is a package, and nothing lies loose beside them."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert not loose, f"modules loose in petri/: {loose}"
    not_folders = [name for name in LAYERS if name != "petri.__main__"
                   and not (PACKAGE.parent / Path(*name.split(".")) / "__init__.py").exists()]
    assert not not_folders, f"layers that are not folders: {not_folders}"


def rank_of(module: str) -> tuple[int, int] | None:
    """(layer, rank inside the layer) of ``module``: what an import may only go down; None for ``petri``."""
    layer = layer_of(module)
    if layer is None:
        return None
    package = max((p for p in ORDER_IN_LAYER if module == p or module.startswith(p + ".")), key=len, default=None)
    return layer, ORDER_IN_LAYER.get(package, 0) if package else 0


def arrows_back_up(imports: dict[str, list[str]]) -> list[str]:
    """Each (module, petri module it imports) of ``imports`` that goes up: to a higher layer, or in
    one layer to a package ranked above the importer's (``ORDER_IN_LAYER``), once per pair."""
    found = []
    for module, targets in imports.items():
        own = rank_of(module)
        for target in dict.fromkeys(targets):
            theirs = rank_of(target) if target.startswith("petri.") else None
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} (layer {own[0]}, rank {own[1]}) imports {target} (layer {theirs[0]}, rank {theirs[1]})")
    return found


def test_arrows_back_up_are_upward_imports_and_imports_up_a_layers_order():
    assert arrows_back_up({"petri.web.server": ["petri.cli.options", "petri.cli.options", "petri.app.service"]}) == [
        "petri.web.server (layer 5, rank 0) imports petri.cli.options (layer 5, rank 1)"]
    assert len(arrows_back_up({"petri.core.dish": ["petri.engine.base", "petri.measure.metrics"]})) == 2
    assert arrows_back_up({"petri.cli.main": ["petri.web.server", "petri.app.service"],
                           "petri.study.execution.runner": ["petri.runs.store", "petri.core.dish"]}) == []


def test_no_import_reaches_up_a_layer():
    """0 arrows back up (issue 61: ``petri.web.server`` imported ``petri.cli.options`` while the
    command line imports the web server; the options both read live in ``petri.app.model_options``)."""
    arrows = arrows_back_up({module: [target for target, _ in imports_of(path)]
                             for module, path in all_modules().items()})
    assert not arrows, "\n".join(arrows)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if state.get(nxt) is None and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if state.get(node) is None and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_sees_a_circle_and_a_clean_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def import_graph(type_only: bool) -> dict[str, set[str]]:
    """module → the petri modules it imports (``type_only``: the TYPE_CHECKING ones too)."""
    modules = all_modules()
    return {
        module: {target for target, runtime in imports_of(path)
                 if (runtime or type_only) and target in modules and target != module}
        for module, path in modules.items()
    }


def test_the_type_only_graph_has_the_type_checking_edges():
    """``petri.study.results.report`` imports ``petri.study.execution.runner`` under TYPE_CHECKING only: the type-only
    graph has that edge, the run-time one does not (so the circle test below can see such circles)."""
    assert "petri.study.execution.runner" in import_graph(type_only=True)["petri.study.results.report"]
    assert "petri.study.execution.runner" not in import_graph(type_only=False)["petri.study.results.report"]


@pytest.mark.parametrize("type_only", [False, True], ids=["run-time", "type-only-too"])
def test_no_import_circles(type_only):
    modules = all_modules()
    graph = import_graph(type_only)
    # importing a submodule runs its package's __init__ first: count that edge too
    for module in modules:
        parent = module.rpartition(".")[0]
        if parent in modules and parent != "petri":
            for deps in graph.values():
                if module in deps:
                    deps.add(parent)
    assert find_cycle(graph) is None, f"import circle: {' -> '.join(find_cycle(graph))}"


def test_only_the_engine_imports_torch_mlx_or_transformers():
    offenders = [
        f"{module} imports {target}"
        for module, path in all_modules().items()
        if layer_of(module) != 2
        for target, runtime in imports_of(path)
        if runtime and target.split(".")[0] in HEAVY
    ]
    assert not offenders, "\n".join(offenders)


def test_library_files_stay_short():
    long_files = {str(p.relative_to(PACKAGE.parent)): n for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long_files, f"over {MAX_LINES} lines: {long_files}"


def test_a_sub_package_keeps_its_parents_layer():
    """``petri/study/figures/`` is layer 3 as ``petri/study/`` is; no sub-package has an entry of its own."""
    assert layer_of("petri.study.figures.plots") == layer_of("petri.study") == 3
    assert layer_of("petri.web.ui.dish_tab.dish") == 5 and layer_of("petri.engine.cuda.fused.fused_logits") == 2
    nested = [m for m in all_modules() if m.count(".") >= 3 and layer_of(m) != LAYERS[".".join(m.split(".")[:2])]]
    assert not nested, nested


def test_no_folder_is_flat():
    """Issue 61, item 6: a folder's sub-groups are sub-packages, not file-name prefixes."""
    crowded = {str(init.parent.relative_to(PACKAGE.parent)): n for init in PACKAGE.rglob("__init__.py")
               if (n := sum(p.name != "__init__.py" for p in init.parent.glob("*.py"))) > MAX_MODULES}
    assert not crowded, f"folders over {MAX_MODULES} modules: {crowded}"


@pytest.mark.parametrize(
    "modules",
    [
        "petri.core.trajectory, petri.core.dish, petri.measure.metrics, petri.measure.tables, petri.stats.groups, petri.measure.nouns",
        "petri.study.execution.runner, petri.study.results.analysis, petri.runs.store, petri.runs.export, petri.app.service",
    ],
)
def test_numpy_layers_import_without_torch(modules):
    """Importing the layers above the engine loads neither torch nor transformers (a fresh process)."""
    code = (f"import sys, {modules}; heavy = [m for m in ('torch', 'transformers', 'mlx') if m in sys.modules]; "
            "print(heavy); assert not heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_above_the_engine_reads_the_framework_model():
    """The protocol (``petri.engine.base.SamplingModel``) gives what the upper layers need; the
    framework model behind it (``lm.model``) and a torch model's tier (``lm.fast_tier``: what
    ``facts()`` gives as data, the service's ``model_facts()``) are the engine's own."""
    import re

    reads = re.compile(r"\blm\.(model|fast_tier)\b|getattr\(\s*[\w.]*lm\s*,\s*[\"'](model|fast_tier)[\"']")
    offenders = [
        f"{module}:{number}: {line.strip()}"
        for module, path in all_modules().items()
        if layer_of(module) != 2
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if reads.search(line)
    ]
    assert not offenders, "\n".join(offenders)


def test_the_tests_mirror_the_package():
    """Every test folder but the cross-cutting ones names a folder of petri/, and no test file lies at
    the top of tests/ but the house-wide checks."""
    tests = PACKAGE.parent / "tests"
    cross_cutting = {"reliability", "experiments", "docs"}
    folders = {p.parent.relative_to(tests).as_posix() for p in tests.rglob("test_*.py")} - {"."}
    unmirrored = sorted(f for f in folders if f.split("/")[0] not in cross_cutting and not (PACKAGE / f).is_dir())
    assert not unmirrored, f"test folders with no petri/ folder of that name: {unmirrored}"
    top = sorted(p.name for p in tests.glob("test_*.py"))
    assert top == ["test_layers.py", "test_one_definition.py"], top


def test_a_tests_place_gives_its_markers():
    from markers_support import markers_for

    assert markers_for("web/ui/test_browser_stats.py") == ["browser"]
    assert markers_for("reliability/test_reliability_hostile.py") == ["process", "fuzz"]
    assert markers_for("engine/cuda/test_fp8.py") == ["gpu"]
    assert markers_for("cli/test_install.py") == ["process"]
    assert markers_for("docs/test_site.py") == ["process"] and markers_for("docs/test_layout.py") == []
    assert markers_for("engine/test_sampler.py") == [] and markers_for("web/ui/test_ui.py") == []


#: The one module that reads the ``PETRI_*`` variables (docs/configuration.md).
CONFIG_MODULE = "petri.core.config"


def environ_reads(source: str) -> list[str]:
    """The environment variables ``source`` reads by name: ``os.environ[K]``, ``os.environ.get(K)``,
    ``os.getenv(K)``, ``K in os.environ`` (``environ`` / ``getenv`` imported from ``os`` too), ``K``
    a string or a module-level name bound to one; ``?`` where the name is made at run time."""
    tree = ast.parse(source)
    constants = {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                 for target in node.targets if isinstance(target, ast.Name)}

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ")

    def name_of(key: ast.AST) -> str:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
        return constants.get(key.id, "?") if isinstance(key, ast.Name) else "?"

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute | ast.Name):
            func = node.func
            if (isinstance(func, ast.Attribute) and is_environ(func.value)) or (
                    isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                    isinstance(func, ast.Name) and func.id == "getenv"):
                key = node.args[0]
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            key = node.left
        if key is not None:
            found.append(name_of(key))
    return found


def test_environ_reads_sees_every_form():
    source = ("import os\nfrom os import environ, getenv\nNAME = 'PETRI_B'\n"
              "os.environ['PETRI_A']; os.environ.get(NAME); os.getenv('HF_HOME'); getenv('PETRI_C')\n"
              "'PETRI_D' in os.environ; environ.setdefault('X', '1'); os.environ.get(f'PETRI_{NAME}')\n"
              "PetriConfig.from_env(os.environ)\n")
    assert sorted(environ_reads(source)) == ["?", "HF_HOME", "PETRI_A", "PETRI_B", "PETRI_C", "PETRI_D", "X"]


def test_only_the_configuration_reads_petri_variables():
    """Every ``PETRI_*`` variable is read by :mod:`petri.core.config` (the entry points hand it
    ``os.environ`` whole); no other module, ``app.py`` included, reads one by name or by a name made
    at run time."""
    sources = {module: path for module, path in all_modules().items() if module != CONFIG_MODULE}
    sources["app"] = PACKAGE.parent / "app.py"
    offenders = [f"{module} reads {name}" for module, path in sources.items()
                 for name in environ_reads(path.read_text()) if name.startswith("PETRI_") or name == "?"]
    assert not offenders, "\n".join(offenders)


def private_names_imported(path: Path) -> list[tuple[str, str]]:
    """(module, name) for each ``from petri.… import _name`` in ``path`` (lazy imports too)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("petri")
            for alias in node.names if alias.name.startswith("_")]


def test_private_names_imported_reads_lazy_imports(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from petri.a.b import _c, d\ndef f():\n    from petri.e import _g\nfrom numpy import _h\n")
    assert private_names_imported(source) == [("petri.a.b", "_c"), ("petri.e", "_g")]


def test_no_private_name_crosses_a_package():
    """A ``_name`` is its package's own: a module of another package (``petri.engine.cuda`` and
    ``petri.engine.torch``, a family and a backend) imports only public names; what two packages
    share is public in the lower one (issue 61)."""
    crossing = []
    for module, path in all_modules().items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        crossing += [f"{module} imports {target}.{name}" for target, name in private_names_imported(path)
                     if target.rpartition(".")[0] != package and target != package]
    assert not crossing, "\n".join(crossing)


def test_the_web_edge_imports_no_torch_until_a_model_loads():
    """Importing the web app, the server and what ``app.py`` imports loads no torch, transformers or
    MLX (the engine's facts reach the edge as data); loading a model does (a fresh process)."""
    code = ("import runpy, sys, petri.web.app, petri.web.server, petri.web.ui.build; "
            "runpy.run_path('app.py', run_name='app'); "
            "heavy = [m for m in ('torch', 'transformers', 'mlx') if m in sys.modules]; print(heavy); assert not heavy; "
            "from petri.engine.select import load_backend_model; load_backend_model('petri-tiny', device='cpu'); "
            "assert 'torch' in sys.modules, 'a model loaded without torch'")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr
