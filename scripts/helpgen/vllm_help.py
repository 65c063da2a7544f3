#!/usr/bin/env python3
"""Print `vllm serve --help=all` from vLLM's own argument definitions.

vLLM cannot be installed here (no PyPI, no GPU), so this runs vLLM's real
argparse code on a vLLM source tree without importing the rest of vLLM:

- a sys.meta_path finder loads the files that define the `serve` arguments
  from the tree (REAL below: the config dataclasses in vllm/config/,
  vllm/engine/arg_utils.py, vllm/entrypoints/openai/cli_args.py,
  vllm/entrypoints/cli/serve.py, vllm/utils/argparse_utils.py with its
  FlexibleArgumentParser, vllm/envs.py for environment-variable defaults,
  and the tool-parser registry), and answers every other import (torch,
  transformers, the rest of vLLM) with a permissive stub module whose
  attributes are classes that accept any call;
- names that reach the help text from a stubbed module (argparse choices
  given as Literal aliases) are read from the real file with the ast
  module (FROM_AST below) instead of being stubbed;
- it then builds the parser as `vllm` (vllm/entrypoints/cli/main.py) does
  for its `serve` subcommand and parses `serve --help=all`, which prints
  the help and exits.

No vLLM code is kept in this file. COLUMNS fixes argparse's line width.
At the end it lists, on standard error, every stub object that reached the
parser (as a type, default or choice), so a stubbed value cannot slip into
the text unnoticed.

Usage:
  COLUMNS=100 python3 vllm_help.py VLLM_TREE > vllm-serve-help.txt

VLLM_TREE is the directory holding the `vllm` package sources (a checkout's
root). With --revert-gambit, the changes that the fork
Dao-AILab/gambit-parallel-reasoning makes to the serve arguments are undone
as the files are read (see GAMBIT below); each must match exactly once.
"""

import argparse
import ast
import importlib
import importlib.abc
import importlib.machinery
import linecache
import os
import sys
import types
from typing import Literal

# Modules loaded from the vLLM tree (a name ending in ".*" covers a package's
# modules). Everything else under vllm and every third-party import is a stub.
REAL = [
    "vllm.config", "vllm.config.*",
    "vllm.engine.arg_utils",
    "vllm.entrypoints.openai.cli_args",
    "vllm.entrypoints.cli.serve",
    "vllm.entrypoints.utils",
    "vllm.entrypoints.constants",
    "vllm.entrypoints.openai.tool_parsers",
    "vllm.entrypoints.openai.tool_parsers.abstract_tool_parser",
    "vllm.utils.argparse_utils",
    "vllm.envs",
]

# Stubbed modules whose named module-level assignments (Literal aliases and
# other literals) are evaluated from the real file's AST.
FROM_AST = {
    "vllm.entrypoints.chat_utils": ["ChatTemplateContentFormatOption"],
    "vllm.model_executor.layers.quantization": ["QuantizationMethods"],
    # SchedulerConfig() runs when a default_factory makes one.
    "vllm.utils": ["DEFAULT_MAX_NUM_BATCHED_TOKENS", "POOLING_MODEL_MAX_NUM_BATCHED_TOKENS",
                   "MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS"],
}

# The fork's additions to the serve arguments, undone with --revert-gambit:
# (file, text in the fork, text without the fork's change).
GAMBIT = [
    ("vllm/config/scheduler.py",
     'SchedulerPolicy = Literal["fcfs", "priority", "gambit"]',
     'SchedulerPolicy = Literal["fcfs", "priority"]'),
    ("vllm/config/scheduler.py",
     ' ties).\\n\n    - "gambit" sorts active requests by score (higher-first) and prunes lower\n'
     '    scored ones when KV cache blocks are exhausted."""',
     ' ties)."""'),
    ("vllm/engine/arg_utils.py",
     '        gambit_kwargs = get_kwargs(GambitConfig)\n'
     '        gambit_group = parser.add_argument_group(\n'
     '            title="GambitConfig",\n'
     '            description=GambitConfig.__doc__,\n'
     '        )\n'
     '        gambit_group.add_argument(\n'
     '            "--gambit-enable", **gambit_kwargs["enable"]\n'
     '        )\n'
     '        gambit_group.add_argument(\n'
     '            "--gambit-step-scorer-path", **gambit_kwargs["step_scorer_path"]\n'
     '        )\n\n',
     ''),
]


def is_real(name):
    for r in REAL:
        if r == name or (r.endswith(".*") and name.startswith(r[:-1])):
            return True
    return False


class StubMeta(type):
    """Stub classes: any attribute is another stub class."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = cls.__dict__.get("_subs", {}).get(name)
        if sub is None:
            sub = StubMeta(name, (Stub,), {"_subs": {}, "__module__": cls.__module__,
                                           "__qualname__": cls.__qualname__ + "." + name})
            cls._subs[name] = sub
        return sub

    def __call__(cls, *args, **kwargs):
        # A stub used as a decorator returns what it decorates.
        if len(args) == 1 and not kwargs and (isinstance(args[0], type) or callable(args[0])) \
                and not isinstance(args[0], Stub):
            return args[0]
        return super().__call__()

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __repr__(cls):
        return f"<stub {cls.__module__}.{cls.__qualname__}>"


class Stub(metaclass=StubMeta):
    """A stub instance: falsy, empty, and any attribute or call is a stub."""

    _subs = {}

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(type(self), name)

    def __call__(self, *args, **kwargs):
        return type(self)(*args, **kwargs)

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        # A stubbed type in a pydantic dataclass field validates anything
        # (validation does not reach the help text).
        from pydantic_core import core_schema
        return core_schema.any_schema()

    def __repr__(self):
        return f"<stub instance {type(self).__module__}.{type(self).__qualname__}>"


STUBS = []  # the stub modules made, for the report at the end


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        cls = StubMeta(name, (Stub,), {"_subs": {}, "__module__": self.__name__,
                                       "__qualname__": name})
        setattr(self, name, cls)
        return cls


def ast_values(path, names):
    """The module-level assignments NAME = <literal or Literal[...]> of a file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                and st.targets[0].id in names:
            code = compile(ast.Expression(st.value), path, "eval")
            out[st.targets[0].id] = eval(code, {"__builtins__": {}, "Literal": Literal})
    missing = set(names) - set(out)
    if missing:
        raise SystemExit(f"{path}: no {', '.join(sorted(missing))}")
    return out


def class_literals(path, cls):
    """The class attributes of CLS in a file whose values are literals."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for st in node.body:
                target = st.target if isinstance(st, ast.AnnAssign) else \
                    st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else None
                if isinstance(target, ast.Name) and st.value is not None:
                    try:
                        out[target.id] = ast.literal_eval(st.value)
                    except ValueError:
                        pass
            return out
    raise SystemExit(f"{path}: no class {cls}")


class Loader(importlib.abc.Loader):
    def __init__(self, tree, revert):
        self.tree, self.revert = tree, revert

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        path = module.__spec__.origin
        rel = os.path.relpath(path, self.tree)
        module.__file__ = path  # inspect.getsource reads the docstrings from it
        src = open(path, encoding="utf-8").read()
        if self.revert:
            for f, old, new in GAMBIT:
                if f == rel:
                    if src.count(old) != 1:
                        raise SystemExit(f"{rel}: the fork's text {old[:60]!r}... is not there exactly once")
                    src = src.replace(old, new)
            # inspect.getsource (which get_attr_docs uses for the help texts)
            # must see the same text: mtime None keeps the entry in linecache.
            linecache.cache[path] = (len(src), None, src.splitlines(True), path)
        exec(compile(src, path, "exec"), module.__dict__)


class StubLoader(importlib.abc.Loader):
    def __init__(self, tree):
        self.tree = tree

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        STUBS.append(module.__name__)
        if module.__name__ == "vllm.utils.import_utils":
            # LazyLoader(local_name, globals, module_name) stands for the
            # module; the configs read Literal aliases through it.
            module.LazyLoader = lambda local, glob, name: importlib.import_module(name)
        if module.__name__ == "vllm.platforms":
            # DeviceConfig(device="auto") asks the platform for its device
            # type: the help is that of a CUDA install.
            # Its literal class attributes (simple_compile_backend reaches the
            # --compilation-config default) are read from platforms/interface.py
            # (Platform) and platforms/cuda.py (CudaPlatformBase); its methods
            # are stubs.
            attrs = {}
            for f, cls in (("interface.py", "Platform"), ("cuda.py", "CudaPlatformBase")):
                attrs.update(class_literals(os.path.join(self.tree, "vllm", "platforms", f), cls))
            attrs.update({"_subs": {}, "__module__": module.__name__, "__qualname__": "CudaPlatform"})
            module.current_platform = StubMeta("CudaPlatform", (Stub,), attrs)()
        names = FROM_AST.get(module.__name__)
        if names:
            path = os.path.join(self.tree, *module.__name__.split("."))
            path = os.path.join(path, "__init__.py") if os.path.isdir(path) else path + ".py"
            module.__dict__.update(ast_values(path, names))


class Finder(importlib.abc.MetaPathFinder):
    """Real files for REAL, stubs for everything else that is not stdlib,
    pydantic, typing_extensions, yaml or regex (which are installed)."""

    INSTALLED = {"pydantic", "pydantic_core", "typing_extensions", "yaml", "regex",
                 "annotated_types", "typing_inspection", "_yaml"}

    def __init__(self, tree, revert):
        self.tree = tree
        self.loader = Loader(tree, revert)
        self.stub = StubLoader(tree)

    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in self.INSTALLED:
            return None
        if is_real(name):
            base = os.path.join(self.tree, *name.split("."))
            if os.path.isfile(os.path.join(base, "__init__.py")):
                return importlib.machinery.ModuleSpec(
                    name, self.loader, origin=os.path.join(base, "__init__.py"), is_package=True)
            if os.path.isfile(base + ".py"):
                return importlib.machinery.ModuleSpec(name, self.loader, origin=base + ".py")
            raise SystemExit(f"{name}: no such file under {self.tree}")
        return importlib.machinery.ModuleSpec(name, self.stub, is_package=True)


def stubbed(value):
    """Whether a stub is, or shows in the printed form of, VALUE."""
    return isinstance(value, (Stub, StubMeta)) or "<stub" in repr(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tree", help="directory holding the vllm package sources")
    ap.add_argument("--revert-gambit", action="store_true",
                    help="undo Dao-AILab/gambit-parallel-reasoning's changes to the arguments")
    opts = ap.parse_args()
    tree = os.path.abspath(opts.tree)

    # vLLM reads the attribute docstrings (the help texts) only when the
    # command line asks for help (arg_utils.NEEDS_HELP), and argparse names
    # the program after argv[0].
    sys.argv = ["vllm", "serve", "--help=all"]
    sys.meta_path.insert(0, Finder(tree, opts.revert_gambit))

    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.entrypoints.utils import VLLM_SUBCMD_PARSER_EPILOG
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # As vllm/entrypoints/cli/main.py builds it, less the other subcommands
    # and the --version action (which asks importlib.metadata for vllm's
    # installed version); neither reaches `vllm serve --help=all`.
    parser = FlexibleArgumentParser(
        description="vLLM CLI",
        epilog=VLLM_SUBCMD_PARSER_EPILOG.format(subcmd="[subcommand]"),
    )
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand().subparser_init(subparsers)

    bad = []
    for action in serve._actions:
        for attr in ("type", "default", "choices", "metavar", "const", "help"):
            if stubbed(getattr(action, attr, None)):
                bad.append(f"{'/'.join(action.option_strings) or action.dest}: {attr} "
                           f"{getattr(action, attr)!r}")
    if bad:
        raise SystemExit("stub values reached the parser:\n  " + "\n  ".join(bad))
    sys.stderr.write("stubbed modules: " + " ".join(sorted(STUBS)) + "\n")

    try:
        parser.parse_args(sys.argv[1:])
    except SystemExit as e:
        if e.code not in (0, None):
            raise
        return
    raise SystemExit("parse_args did not print the help")


if __name__ == "__main__":
    main()
