"""The module layering of ARCHITECTURE.md, checked: what noxfile.py imports runs in a bare
interpreter, commands never import one another, and the pipeline's stages (and bisect's
modules) import only the ones before them."""

from __future__ import annotations

import ast
import subprocess

from conftest import ROOT

STDLIB_ONLY = ("harness.paths", "harness.errors", "harness.bounded", "harness.redaction", "harness.gitcmd", "harness.configs",
               "harness.targets", "harness.suite", "harness.matrix", "harness.estimates", "harness.demo",
               "harness.nvidia_smi", "harness.typed_toml")


def test_what_noxfile_imports_needs_only_the_standard_library(bare_python):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); " + "; ".join(f"import {m}" for m in STDLIB_ONLY)
    proc = subprocess.run([bare_python, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


def test_commands_never_import_one_another():
    for path in (ROOT / "harness" / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness.commands"):
                assert node.module == "harness.commands.common_args", (path.name, node.module)


def _imports(path, package_modules: set[str], deferred: bool = False) -> set[str]:
    """The harness modules `path` imports at module level, TYPE_CHECKING blocks included (a
    type import is still a dependency; an import inside a function defers a heavy one), and with
    `deferred` those inside functions too."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if deferred else _module_level(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in package_modules}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("harness"):
            subs = {f"{node.module}.{a.name}" for a in node.names} & package_modules
            found |= subs or ({node.module} & package_modules)
    return found


def _module_level(tree: ast.Module):
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:` and guarded imports
            stack += [*node.body, *node.orelse, *getattr(node, "handlers", []), *getattr(node, "finalbody", [])]
        elif isinstance(node, ast.ExceptHandler):
            stack += node.body


def _module_graph(deferred: bool = False) -> dict[str, set[str]]:
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "harness").rglob("*.py")}
    return {m: _imports(p, set(files), deferred) - {m} for m, p in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_module_level_import_cycle_type_checking_ones_included():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the check can fail
    graph = _module_graph()
    assert "harness.suite" not in graph["harness.targets"] and "harness.run" not in graph["harness.recorder"]
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])



def test_no_import_cycle_with_the_deferred_imports_either():
    """An import inside a function defers a heavy module (matplotlib, scipy), never a circle: a
    deferred import that closes one (report/emit drawing through report/plot, which took its
    folder name from emit) still needs both modules to be importable in either order."""
    graph = _module_graph(deferred=True)
    assert "harness.report.plot" in graph["harness.report.emit"]  # deferred: seen only here
    assert "harness.report.plot" not in _module_graph()["harness.report.emit"]
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])

# The output layer and what prints it (ARCHITECTURE.md's layer table: output, commands).
ABOVE_THE_RUNNING_LAYER = ("harness.report", "harness.commands", "harness.cli")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _reaching_up(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Modules below the output layer that import from it at module level, with what they import."""
    above = lambda m: any(_within(m, p) for p in ABOVE_THE_RUNNING_LAYER)  # noqa: E731
    return {m: sorted(d for d in deps if above(d)) for m, deps in graph.items()
            if not above(m) and any(above(d) for d in deps)}


def test_nothing_below_the_report_imports_it():
    """The report renders what the layers below it compute: the reproducer, a probe's table cell
    or text figure format numbers through harness.textfmt (and harness.sparkline), never through
    the report. A function-level import (a probe's plot hook deferring matplotlib) is not one."""
    assert _reaching_up({"harness.reproducer": {"harness.report.format", "harness.verdict_stats"},
                         "harness.report.rows": {"harness.compare"}}) == {"harness.reproducer": ["harness.report.format"]}
    assert _reaching_up(_module_graph()) == {}


# The pipeline's stages in the order a stage may import them (harness/pipeline/__init__.py), and
# bisect's modules so: an earlier one never imports a later one.
PIPELINE_STAGES = ("slots", "start_order", "plan", "open", "outcome", "steps", "verify_relaunched", "interleave",
                   "schedule", "finish")
BISECT_MODULES = ("session", "predicate", "search", "driver")


def _reaching_forward(graph: dict[str, set[str]], package: str, order: tuple[str, ...]) -> dict[str, list[str]]:
    """Each module of `package` that imports a later one of `order`, with what it imports."""
    rank = {f"{package}.{name}": i for i, name in enumerate(order)}
    return {m: sorted(d for d in graph[m] if d in rank and rank[d] > rank[m]) for m in rank
            if any(d in rank and rank[d] > rank[m] for d in graph[m])}


def test_a_pipeline_stage_imports_only_the_stages_before_it():
    fake = {"p.a": {"p.b"}, "p.b": set()}
    assert _reaching_forward(fake, "p", ("a", "b")) == {"p.a": ["p.b"]}  # the check can fail
    graph = _module_graph()
    for package, order in (("harness.pipeline", PIPELINE_STAGES), ("harness.bisect", BISECT_MODULES)):
        modules = {m.removeprefix(package + ".") for m in graph if m.startswith(package + ".")}
        assert modules == set(order), f"{package}: every module has its place in the order"
        assert _reaching_forward(graph, package, order) == {}
