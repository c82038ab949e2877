"""Many plans through the shared checker's check() in one process (tests/support/mutate.rs).

usage: python3 check_many.py TOOLS_DIR   (TOOLS_DIR holds check_plan.py)
stdin: one JSON object per line, {"graph_path": PATH, "plan": {...}, "budget": BYTES|null};
stdout: one line per request, in order: {"valid": true, "peak": N} or
{"valid": false, "error": "...", "crash": bool} (crash: check() raised something other than
its own rejection). Each graph file is read once.
"""
import json
import sys

sys.path.insert(0, sys.argv[1])
from check_plan import Bad, check  # noqa: E402

graphs = {}
for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    path = req["graph_path"]
    if path not in graphs:
        with open(path) as fh:
            graphs[path] = json.load(fh)
    try:
        r = check(graphs[path], req["plan"], req.get("budget"))
        out = {"valid": True, "peak": r["peak"]}
    except Bad as e:
        out = {"valid": False, "error": str(e), "crash": False}
    except Exception as e:  # a checker bug, not a verdict
        out = {"valid": False, "error": f"{type(e).__name__}: {e}", "crash": True}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
