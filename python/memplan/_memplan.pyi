"""Type stubs of the native module memplan._memplan (see memplan/__init__.py)."""

from os import PathLike
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

GraphLike = Union[Mapping[str, Any], str, bytes, PathLike]
"""A memplan-graph/1 document: a dict, JSON text, a path, or "sample" (the bundled sample)."""
PlanLike = Union["Plan", Mapping[str, Any], str, bytes, PathLike]
"""A memplan-plan/1 document: a Plan, a dict, JSON text or a path."""
BuffersLike = Union[Sequence[Mapping[str, Any]], str]
"""Buffers to place: dicts {"id", "lower", "upper", "size", "alignment"?} or a minimalloc CSV (text or path)."""

__version__: str
PLAN_FORMAT: str

class MemplanError(Exception):
    """Base class of every memplan error."""

class BadInputError(MemplanError):
    """Bad input: a graph, plan, buffer list or option that cannot be used (CLI exit code 2)."""

class InvalidPlanError(MemplanError):
    """The validator rejected a plan (CLI `invalid: ...`, exit code 1)."""

class PlanningError(MemplanError):
    """The pipeline could not produce a plan for valid input."""

class Plan:
    """A memory plan (memplan-plan/1) with the graph it refers to."""

    @staticmethod
    def load(plan: PlanLike) -> "Plan":
        """A plan from memplan-plan/1 JSON text, a dict or a path."""
    def to_json(self) -> str:
        """The plan as memplan-plan/1 JSON text (what `memplan plan` writes)."""
    def to_dict(self) -> Dict[str, Any]:
        """The plan as a dict."""
    @property
    def stats(self) -> Dict[str, Any]:
        """The planner's statistics (peak_bytes, lower_bound_bytes, gap, status, ...)."""
    @property
    def instructions(self) -> List[Dict[str, Any]]:
        """The instruction stream (alloc / exec / free / spill_out / spill_in)."""
    @property
    def peak_bytes(self) -> int:
        """Largest offset + size reserved in the arena (bytes)."""
    @property
    def arena_bytes(self) -> int:
        """Arena size the plan needs (bytes)."""
    @property
    def host_bytes(self) -> int:
        """Host pool size for spills (bytes)."""
    @property
    def status(self) -> Optional[str]:
        """The plan's status: optimal, feasible, time_limit, cancelled or heuristic_only (None when the plan gives none)."""
    @property
    def graph(self) -> Optional[Dict[str, Any]]:
        """The graph the plan refers to (rewritten when a rewrite changed it); None when loaded."""
    def check(self, graph: GraphLike, budget: Optional[int] = None) -> Dict[str, Any]:
        """Validate against `graph`: {valid, peak_bytes, max_live_bytes, host_peak_bytes, execs, spills} (POST /v1/check's fields); raises InvalidPlanError."""

def plan(
    graph: GraphLike,
    *,
    rewrite: Union[str, Sequence[str]] = (),
    conv_algos: Optional[str] = None,
    tile: Union[str, int, None] = None,
    tile_overhead_pct: float = 10.0,
    order: str = "auto",
    strategy: str = "auto",
    effort: int = 1,
    time_limit_s: float = 60.0,
    inplace: bool = False,
    budget: Union[int, str, None] = None,
    spill_strategy: str = "best",
    tiers: bool = False,
    tier_alignment: Optional[str] = None,
    device_profile: Optional[Mapping[str, Any]] = None,
    link_gbps: Optional[float] = None,
    streams: int = 1,
    stream_peak_ratio: float = 1.10,
    max_ratio: float = 1.05,
    max_pieces: int = 16,
) -> Union[Plan, "SymbolicPlan"]:
    """Plan `graph` with the pipeline options (names and defaults of the HTTP body's `options`).

    As the CLI's `--conv-algos` and `--tile`, a given `conv_algos` (`auto`, `fastest`,
    `min-memory`) or `tile` (`auto` or a strip count) adds its rewrite, and `"off"` takes it out.

    A symbolic graph (with `symbols`) gets a SymbolicPlan for its whole range; `max_ratio` and
    `max_pieces` (symbolic graphs only) shape its pieces, as `memplan plan`'s flags."""

class SymbolicPlan:
    """One plan for every binding of a symbolic graph's symbols (memplan-symbolic-plan/1)."""

    @staticmethod
    def load(plan: Union[Mapping[str, Any], str, bytes, PathLike]) -> "SymbolicPlan":
        """A symbolic plan from JSON text, a dict or a path."""
    def to_json(self) -> str:
        """The plan as memplan-symbolic-plan/1 JSON text (what `memplan plan` writes)."""
    def to_dict(self) -> Dict[str, Any]:
        """The plan as a dict."""
    @property
    def symbols(self) -> Dict[str, Tuple[int, int]]:
        """The declared symbols: {name: (min, max)}."""
    @property
    def pieces(self) -> List[Tuple[str, int, int]]:
        """The split symbol's pieces as (symbol, min, max); empty for one piece."""
    def profile(self) -> List[Dict[str, Any]]:
        """[{binding, peak_bytes, per_binding_bytes, ratio}] at the corners and a few points between."""
    def peak_at(self, **binding: int) -> int:
        """The instantiated peak at a binding, e.g. peak_at(B=17) (bytes)."""
    def instantiate(self, **binding: int) -> Plan:
        """The ordinary plan at a binding, e.g. instantiate(B=17)."""

def check(graph: GraphLike, plan: PlanLike, budget: Optional[int] = None) -> Dict[str, Any]:
    """Validate `plan` against `graph`; raises InvalidPlanError naming the first violation."""

def place(
    buffers: BuffersLike,
    capacity: Optional[int] = None,
    time_limit_s: float = 1.0,
    alignment: int = 1,
    heuristic: bool = False,
) -> Dict[str, Any]:
    """Place buffers in one arena: fits, peak_bytes, lower_bound_bytes, gap, load_bytes, status, method, elapsed_ms, buffers ([{id, offset}] in input order)."""

def reserve(
    plan: Union["SymbolicPlan", Mapping[str, Any], str, bytes, PathLike],
    distribution: Union[Mapping[str, Any], str, PathLike],
    quantile: float = 0.99,
    split: Optional[str] = None,
    batching: bool = False,
    window: int = 16,
    requests: int = 10000,
    seed: int = 0,
    graph: Optional[GraphLike] = None,
) -> Dict[str, Any]:
    """The P99 reservation of a symbolic plan, as `memplan reserve -o` writes it: reserved_bytes,
    quantile_binding, average_utilisation, bindings, and `batching` / `fallback_plans` when asked."""
