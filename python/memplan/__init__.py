"""memplan: memory plans for deep-learning computation graphs.

In which order to run the ops, at which byte offset of one arena each tensor lives, and which
tensors to spill to host memory or recompute to fit a budget. The same planning pipeline as
the ``memplan`` CLI and the HTTP service, with the same options and defaults::

    import memplan
    plan = memplan.plan("graph.json", effort=1, budget="80%")
    plan.stats["peak_bytes"], plan.instructions[:3]
    plan.check("graph.json")            # the independent validator's replay figures
    memplan.place([{"id": "a", "lower": 0, "upper": 2, "size": 1024}, ...])

Graphs are memplan-graph/1 documents (a dict, JSON text or a path; ``"sample"`` is the
bundled sample), plans memplan-plan/1. Errors raise :class:`BadInputError` (bad graph, plan,
option or buffer; the CLI's exit code 2), :class:`InvalidPlanError` (the validator's
verdict) or :class:`PlanningError`, all subclasses of :class:`MemplanError`, with the CLI's
messages. ``memplan.torch`` exports PyTorch modules and replays plans with PyTorch's kernels
(needs torch; imported on demand).
"""

from ._memplan import (
    PLAN_FORMAT,
    BadInputError,
    InvalidPlanError,
    MemplanError,
    Plan,
    PlanningError,
    SymbolicPlan,
    __version__,
    check,
    place,
    plan,
    reserve,
)

__all__ = [
    "PLAN_FORMAT",
    "BadInputError",
    "InvalidPlanError",
    "MemplanError",
    "Plan",
    "PlanningError",
    "SymbolicPlan",
    "__version__",
    "check",
    "place",
    "plan",
    "reserve",
]
