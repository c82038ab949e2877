#!/usr/bin/env python3
"""Export a PyTorch model as a memplan-graph/1 graph.

    tools/export_pytorch.py MODULE:FACTORY --batch N --mode inference|train -o GRAPH.json
        [--input-shape 3,224,224] [--name NAME] [--alignment 256]

A thin command-line shim: the exporter lives in the Python package, python/memplan/_export.py
(`memplan.torch.export` uses the same code and keeps the trace for replaying plans). This
file loads that module by its path, so the tool works from a source checkout without
installing the package or building its native module. Every public name of the module
(`build_graph`, `trace_records`, `load_factory`, `ExportError`, ...) is re-exported here.
See python/memplan/_export.py for what the export does.
"""

import importlib.util
import os
import sys

_IMPL = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), os.pardir, "python", "memplan", "_export.py"
)


def _load():
    path = os.path.normpath(_IMPL)
    if not os.path.isfile(path):
        sys.exit(f"export_pytorch: the exporter module {path} is missing")
    spec = importlib.util.spec_from_file_location("memplan_export_impl", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


_impl = _load()
globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})


def main(argv=None):
    """Runs the tool; returns the exit status (0 written, 2 export error)."""
    return _impl.main(argv, exporter="tools/export_pytorch.py", prog="export_pytorch.py")


if __name__ == "__main__":
    sys.exit(main())
