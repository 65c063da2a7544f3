#!/usr/bin/env python3
"""Print SGLang's `launch_server --help` from its own argument definitions.

SGLang cannot be installed here (no PyPI, no GPU), so this runs argparse on
the real ServerArgs.add_cli_args of a server_args.py taken from an SGLang
checkout, with the modules it imports replaced by stubs. The stubs only
answer imports: no SGLang code is kept in this file. The tool-call and
reasoning parser names and the LoRA target modules (argparse choices) are
read with the ast module from SGLang's own function_call_parser.py,
reasoning_parser.py and utils/common.py; server_args.py imports nothing
else that reaches the help text.

Usage (COLUMNS fixes argparse's line width):
  COLUMNS=100 python3 sglang_help.py SERVER_ARGS.py FUNCTION_CALL_PARSER.py \
      REASONING_PARSER.py UTILS_COMMON.py > testdata/help/sglang-v0.5.6.post2.txt
"""

import argparse
import ast
import importlib.util
import sys
import types


def constant(path, name):
    """The value of the module-level literal NAME = ... in a Python file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for st in tree.body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
            return ast.literal_eval(st.value)
    raise SystemExit(f"{path}: no {name}")


def dict_keys(path, cls, attr):
    """The string keys of the dict literal CLS.ATTR in a Python file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for st in node.body:
                target = getattr(st, "target", None) or (st.targets[0] if isinstance(st, ast.Assign) else None)
                if isinstance(target, ast.Name) and target.id == attr and isinstance(st.value, ast.Dict):
                    return {k.value: None for k in st.value.keys if isinstance(k, ast.Constant)}
    raise SystemExit(f"{path}: no {cls}.{attr} dict")


class Stub(types.ModuleType):
    """A module whose every missing attribute is a harmless callable."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name.isupper():
            return []
        return lambda *a, **k: False


def stub(name, **attrs):
    m = Stub(name)
    m.__path__ = []
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def main():
    server_args, fc_parser, rs_parser, common = sys.argv[1:5]
    for pkg in ["sglang", "sglang.srt", "sglang.srt.function_call", "sglang.srt.parser",
                "sglang.srt.lora", "sglang.srt.utils", "sglang.srt.layers",
                "sglang.srt.layers.attention", "sglang.srt.layers.attention.fla"]:
        stub(pkg)

    class Env:
        def get(self):
            return False

        def is_set(self):
            return False

        def set(self, v):
            pass

    class Envs:
        def __getattr__(self, name):
            return Env()

    stub("sglang.srt.connector", ConnectorType=types.SimpleNamespace(INSTANCE="instance"))
    stub("sglang.srt.environ", envs=Envs(), ToolStrictLevel=types.SimpleNamespace(PARAMETER=1))
    stub("sglang.srt.function_call.function_call_parser",
         FunctionCallParser=type("FunctionCallParser", (), {
             "ToolCallParserEnum": dict_keys(fc_parser, "FunctionCallParser", "ToolCallParserEnum")}))
    stub("sglang.srt.parser.reasoning_parser",
         ReasoningParser=type("ReasoningParser", (), {
             "DetectorMap": dict_keys(rs_parser, "ReasoningParser", "DetectorMap")}))
    stub("sglang.srt.lora.lora_registry", LoRARef=object)
    stub("sglang.srt.layers.attention.fla.chunk_delta_h", CHUNK_SIZE=64)
    stub("sglang.srt.utils.common",
         LORA_TARGET_ALL_MODULES=constant(common, "LORA_TARGET_ALL_MODULES"),
         SUPPORTED_LORA_TARGET_MODULES=constant(common, "SUPPORTED_LORA_TARGET_MODULES"))
    stub("sglang.srt.utils.hf_transformers_utils")
    stub("sglang.utils")

    spec = importlib.util.spec_from_file_location("sglang.srt.server_args", server_args)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    parser = argparse.ArgumentParser(prog="python3 -m sglang.launch_server")
    mod.ServerArgs.add_cli_args(parser)
    sys.stdout.write(parser.format_help())


if __name__ == "__main__":
    main()
