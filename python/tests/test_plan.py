"""The native half of the memplan package: plan, check and place from Python give what the CLI
gives, with the pipeline's option names and defaults, and errors as exceptions carrying the
CLI's messages.

Run: ``pip install ./python pytest && pytest python/tests`` (from the workspace root). The
comparisons with the CLI use ``$MEMPLAN_BIN`` or ``$CARGO_TARGET_DIR/release/memplan`` when
one exists, and skip otherwise (CI builds it first).
"""

import json
import os
import pathlib
import subprocess
import threading
import time

import pytest

import memplan

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "resnet_block.train.json"


def cli_binary():
    """The memplan CLI, or None."""
    candidates = [os.environ.get("MEMPLAN_BIN")]
    target = os.environ.get("CARGO_TARGET_DIR")
    if target:
        candidates.append(os.path.join(target, "release", "memplan"))
    candidates.append(str(ROOT / "target" / "release" / "memplan"))
    candidates.append(os.path.expanduser("~/.cache/memplan-target/release/memplan"))
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cli(*args):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    binary = cli_binary()
    if binary is None:
        pytest.skip("no memplan CLI binary (set MEMPLAN_BIN)")
    p = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def sample_graph():
    return json.loads(SAMPLE.read_text())


def without_timing(text):
    """Plan JSON with every timing field of its stats (`ms`, `*_ms`) set to 0, compact: two
    runs of the same graph and options give equal text (memplan::zoo::determinism)."""

    def blank(v):
        if isinstance(v, dict):
            return {k: (0 if k == "ms" or k.endswith("_ms") else blank(x)) for k, x in v.items()}
        if isinstance(v, list):
            return [blank(x) for x in v]
        return v

    d = json.loads(text)
    d["stats"] = blank(d["stats"])
    return json.dumps(d, sort_keys=True)


def shared_zoo(name):
    """A graph of ../shared/zoo, or skip."""
    shared = pathlib.Path(os.environ.get("MEMPLAN_SHARED_DIR", ROOT.parent / "shared"))
    path = shared / "zoo" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


def test_the_sample_plans_with_the_defaults_exactly_as_the_cli_plans_it(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("plan", str(SAMPLE), "-o", str(out))
    assert code == 0, err
    plan = memplan.plan(SAMPLE)
    assert without_timing(plan.to_json()) == without_timing(out.read_text())


def test_a_budget_and_rewrites_give_the_cli_plan_for_the_same_options(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("plan", str(SAMPLE), "--budget", "80%", "--rewrite", "fuse", "-o", str(out))
    assert code == 0, err
    plan = memplan.plan(SAMPLE, budget="80%", rewrite="fuse")
    assert without_timing(plan.to_json()) == without_timing(out.read_text())
    assert plan.stats["budget"]["budget_bytes"] > 0


def test_a_dict_json_text_a_path_a_pathlike_and_sample_give_one_plan():
    g = sample_graph()
    plans = [
        memplan.plan(g),
        memplan.plan(json.dumps(g)),
        memplan.plan(str(SAMPLE)),
        memplan.plan(SAMPLE),
        memplan.plan(SAMPLE.read_bytes()),
        memplan.plan("sample"),
    ]
    texts = {without_timing(p.to_json()) for p in plans}
    assert len(texts) == 1


def test_the_rewrite_option_takes_the_cli_list_or_a_list_of_names():
    a = memplan.plan(SAMPLE, rewrite="fuse,conv-algos")
    b = memplan.plan(SAMPLE, rewrite=["conv-algos", "fuse"])
    assert without_timing(a.to_json()) == without_timing(b.to_json())
    # `all` and `none` in a list, as in the comma list and over HTTP.
    c = memplan.plan(SAMPLE, rewrite=["all"], strategy="heuristic")
    d = memplan.plan(SAMPLE, rewrite="all", strategy="heuristic")
    assert without_timing(c.to_json()) == without_timing(d.to_json())
    e = memplan.plan(SAMPLE, rewrite=["none"], strategy="heuristic")
    f = memplan.plan(SAMPLE, strategy="heuristic")
    assert without_timing(e.to_json()) == without_timing(f.to_json())
    with pytest.raises(memplan.BadInputError, match="empty item"):
        memplan.plan(SAMPLE, rewrite="fuse,,tile")


def test_json_text_is_read_as_json_even_when_it_is_an_array_or_starts_with_a_bom():
    with pytest.raises(memplan.BadInputError, match="the document is an array"):
        memplan.plan("[1, 2, 3]")
    text = "\ufeff" + json.dumps(sample_graph())
    a = memplan.plan(text)
    b = memplan.plan(SAMPLE)
    assert without_timing(a.to_json()) == without_timing(b.to_json())


def test_a_graph_file_is_read_as_the_cli_reads_it(tmp_path):
    # A byte order mark is dropped, a file that is not UTF-8 is named with the byte.
    marked = tmp_path / "marked.json"
    marked.write_text("\ufeff" + json.dumps(sample_graph()), encoding="utf-8")
    a = memplan.plan(marked)
    b = memplan.plan(SAMPLE)
    assert without_timing(a.to_json()) == without_timing(b.to_json())
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"{\xff}")
    with pytest.raises(memplan.BadInputError, match=r"binary.json: not UTF-8 text \(byte 1"):
        memplan.plan(binary)


def test_option_texts_follow_the_cli_and_http_grammar():
    # What the HTTP service refuses, Python refuses with the same message.
    for budget in ("60 %", "060%", "1e1%", "+60%"):
        with pytest.raises(memplan.BadInputError, match="is not BYTES"):
            memplan.plan(SAMPLE, budget=budget)
    with pytest.raises(memplan.BadInputError, match="has spaces"):
        memplan.plan(SAMPLE, tiers=True, tier_alignment="persistent=256, activations=512")
    with pytest.raises(memplan.BadInputError, match=r"link_gbps 0.0001 is outside \[0.001, 1e12\] GB/s"):
        memplan.plan(SAMPLE, budget="80%", link_gbps=0.0001)
    with pytest.raises(memplan.BadInputError, match="strip count from 2 to 999999999"):
        memplan.plan(SAMPLE, tile=1000000000)


def test_a_tile_or_conv_algos_mode_adds_its_rewrite_as_the_cli_flags_do(tmp_path):
    tiled = memplan.plan(SAMPLE, tile=4)
    assert without_timing(tiled.to_json()) == without_timing(
        memplan.plan(SAMPLE, rewrite="tile", tile="4").to_json()
    )
    assert "rewritten_graph" in tiled.to_dict()
    # None reads as not given (the HTTP service's null).
    assert without_timing(memplan.plan(SAMPLE, tile=None, conv_algos=None).to_json()) == (
        without_timing(memplan.plan(SAMPLE).to_json())
    )
    off = memplan.plan(SAMPLE, rewrite="all", tile="off", conv_algos="off")
    assert without_timing(off.to_json()) == without_timing(
        memplan.plan(SAMPLE, rewrite="fuse").to_json()
    )
    out = tmp_path / "p.json"
    code, _, err = cli("plan", str(SAMPLE), "--conv-algos", "fastest", "-o", str(out))
    assert code == 0, err
    fastest = memplan.plan(SAMPLE, conv_algos="fastest")
    assert without_timing(fastest.to_json()) == without_timing(out.read_text())


def test_the_plan_exposes_stats_instructions_and_the_graph_it_refers_to():
    plan = memplan.plan(SAMPLE)
    stats = plan.stats
    assert stats["peak_bytes"] == plan.peak_bytes > 0
    assert stats["lower_bound_bytes"] <= plan.peak_bytes
    assert plan.status in {"optimal", "heuristic", "time_limit", "node_limit"}
    ops = {i["op"] for i in plan.instructions}
    assert {"alloc", "exec", "free"} <= ops
    assert plan.graph["name"] == sample_graph()["name"]
    d = plan.to_dict()
    assert d["format"] == memplan.PLAN_FORMAT
    assert d["instructions"] == plan.instructions
    assert "peak_bytes=" in repr(plan)


def test_a_plan_round_trips_through_json_and_checks_valid():
    plan = memplan.plan(SAMPLE, budget="70%")
    again = memplan.Plan.load(plan.to_json())
    assert again.to_json() == plan.to_json()
    assert again.graph is None
    report = again.check(SAMPLE)
    assert report["valid"] is True
    assert report["peak_bytes"] == plan.peak_bytes
    assert report["max_live_bytes"] <= report["peak_bytes"]
    assert report["execs"] >= len(sample_graph()["ops"])
    assert memplan.check(sample_graph(), plan.to_dict()) == report


def test_a_plan_with_two_live_tensors_overlapping_is_invalid_and_the_message_names_the_tensor(tmp_path):
    plan = memplan.plan(SAMPLE).to_dict()
    allocs = [i for i in plan["instructions"] if i["op"] == "alloc"]
    # Move the second alloc onto the first one's bytes while the first may still be alive.
    first, second = allocs[0], allocs[1]
    second["offset"] = first["offset"]
    with pytest.raises(memplan.InvalidPlanError) as e:
        memplan.check(SAMPLE, plan)
    message = str(e.value)
    assert second["tensor"] in message or first["tensor"] in message
    # The CLI says the same.
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(plan))
    code, _, err = cli("check", str(SAMPLE), str(p))
    assert code == 1
    assert err.strip() == f"invalid: {message}"


def test_a_malformed_graph_raises_bad_input_with_line_and_column_like_the_cli(tmp_path):
    p = tmp_path / "g.json"
    p.write_text('{"format": "memplan-graph/1",\n  "name": }')
    with pytest.raises(memplan.BadInputError) as e:
        memplan.plan(p)
    assert "line 2" in str(e.value) and "column" in str(e.value)
    assert isinstance(e.value, memplan.MemplanError)
    code, _, err = cli("plan", str(p))
    assert code == 2
    assert str(e.value) in err


def test_a_wrong_field_is_named_by_its_path_and_tensor_as_the_cli_names_it(tmp_path):
    g = sample_graph()
    g["tensors"][3]["size"] = -3
    name = g["tensors"][3]["name"]
    with pytest.raises(memplan.BadInputError) as e:
        memplan.plan(g)
    assert f'tensors[3] ("{name}").size: invalid value: integer `-3`' in str(e.value)
    p = tmp_path / "g.json"
    p.write_text(json.dumps(g))
    code, _, err = cli("plan", str(p))
    assert code == 2
    assert str(e.value).removeprefix("graph: ") in err
    with pytest.raises(memplan.BadInputError, match="effort: invalid value: integer `-1`"):
        memplan.plan(SAMPLE, effort=-1)


def test_an_unknown_option_raises_bad_input_naming_the_option():
    with pytest.raises(memplan.BadInputError, match="efort"):
        memplan.plan(SAMPLE, efort=3)


def test_a_bad_option_value_raises_bad_input_naming_the_option():
    with pytest.raises(memplan.BadInputError, match="budget"):
        memplan.plan(SAMPLE, budget="eighty")
    with pytest.raises(memplan.BadInputError, match="rewrite"):
        memplan.plan(SAMPLE, rewrite="fusion")
    with pytest.raises(memplan.BadInputError, match="effort"):
        memplan.plan(SAMPLE, effort=10**6)


def test_a_nan_or_infinite_option_raises_bad_input_naming_the_option():
    for value in (float("nan"), float("inf")):
        with pytest.raises(memplan.BadInputError, match="time_limit_s .* is not a finite number"):
            memplan.plan("sample", time_limit_s=value)
    with pytest.raises(memplan.BadInputError, match="device_profile.h2d_bytes_per_s"):
        memplan.plan("sample", device_profile={"h2d_bytes_per_s": float("nan")})


def test_a_check_budget_that_is_no_byte_count_raises_bad_input_naming_it():
    plan = memplan.plan(SAMPLE, order="given")
    for budget in (-1, 2**70, "80%", 1.5, True):
        with pytest.raises(memplan.BadInputError, match="budget"):
            plan.check(SAMPLE, budget=budget)
        with pytest.raises(memplan.BadInputError, match="budget"):
            memplan.check(SAMPLE, plan, budget=budget)
    assert plan.check(SAMPLE, budget=plan.arena_bytes)["valid"]


def test_a_missing_file_raises_bad_input_naming_the_path():
    with pytest.raises(memplan.BadInputError, match="no-such-graph.json"):
        memplan.plan("no-such-graph.json")


def test_an_unparseable_plan_raises_bad_input():
    with pytest.raises(memplan.BadInputError, match="plan"):
        memplan.check(SAMPLE, '{"format": "memplan-plan/1"}')


def test_the_gil_is_released_while_planning():
    """Another Python thread keeps running while a plan is computed."""
    g = shared_zoo("resnet50.32.train.json")
    ticks = 0
    done = threading.Event()
    result = {}

    def work():
        started = time.perf_counter()
        result["plan"] = memplan.plan(g, budget="60%")
        result["seconds"] = time.perf_counter() - started
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert result["plan"].peak_bytes > 0
    if result["seconds"] < 0.05:
        pytest.skip(f"planning took {result['seconds'] * 1e3:.1f} ms, too short to observe")
    # Holding the GIL for the whole call would allow at most a couple of ticks.
    assert ticks >= 10, (ticks, result["seconds"])


def test_ctrl_c_stops_a_plan_at_once_with_keyboard_interrupt():
    """Ctrl-C (SIGINT's handler) is heeded while planning, not after the whole plan."""
    import _thread
    import signal

    g = shared_zoo("densenet121.16.train.json")
    # Python's own SIGINT handler, whatever the test runner inherited (a shell's background
    # job starts with SIGINT ignored, and then interrupt_main does nothing).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    # About 20 s on two cores: the budgeted joint program.
    timer = threading.Timer(0.5, _thread.interrupt_main)
    started = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            memplan.plan(g, budget="60%", time_limit_s=120)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert time.perf_counter() - started < 5.0
    # The module still plans afterwards.
    assert memplan.plan("sample").peak_bytes > 0


def test_place_fits_buffers_without_overlap_and_reports_the_bound():
    buffers = [
        {"id": "a", "lower": 0, "upper": 2, "size": 1024},
        {"id": "b", "lower": 1, "upper": 3, "size": 512},
        {"id": "c", "lower": 2, "upper": 4, "size": 1024},
        {"id": 7, "lower": 0, "upper": 4, "size": 256, "alignment": 256},
    ]
    r = memplan.place(buffers)
    assert r["fits"] is True
    assert r["peak_bytes"] == r["lower_bound_bytes"] == r["load_bytes"] == 1792
    assert [b["id"] for b in r["buffers"]] == ["a", "b", "c", "7"]
    off = {b["id"]: b["offset"] for b in r["buffers"]}
    assert off["7"] % 256 == 0
    for x in buffers:
        for y in buffers:
            if x is y or x["upper"] <= y["lower"] or y["upper"] <= x["lower"]:
                continue
            ox, oy = off[str(x["id"])], off[str(y["id"])]
            assert ox + x["size"] <= oy or oy + y["size"] <= ox


def test_place_takes_a_minimalloc_csv_and_proves_a_too_small_capacity_infeasible():
    text = "id,lower,upper,size\na,0,2,100\nb,1,3,100\n"
    r = memplan.place(text, capacity=150)
    assert r["fits"] is False
    assert r["status"] == "infeasible"
    assert memplan.place(text, capacity=200)["fits"] is True


def test_place_refuses_duplicate_ids_and_bad_lifetimes_naming_the_buffer():
    with pytest.raises(memplan.BadInputError, match=r"buffers\[1\] \(buffer `a`\)"):
        memplan.place([{"id": "a", "lower": 0, "upper": 1, "size": 1},
                       {"id": "a", "lower": 0, "upper": 1, "size": 1}])
    with pytest.raises(memplan.BadInputError, match=r"buffers\[0\]"):
        memplan.place([{"id": "x", "lower": 3, "upper": 1, "size": 1}])
    with pytest.raises(memplan.BadInputError, match="power of two"):
        memplan.place([{"id": "x", "lower": 0, "upper": 1, "size": 1}], alignment=3)
    with pytest.raises(memplan.BadInputError, match=r"buffers\[0\]"):
        memplan.place([{"id": "x", "lower": 0, "upper": 1, "size": 1, "colour": 2}])
    big = 2**63
    with pytest.raises(memplan.BadInputError,
                       match=r"buffers\[1\] \(buffer `b`\): with it the buffers alive at step 0"):
        memplan.place([{"id": "a", "lower": 0, "upper": 2, "size": big},
                       {"id": "b", "lower": 0, "upper": 1, "size": big},
                       {"id": "c", "lower": 0, "upper": 1, "size": big}])


SYMBOLIC = ROOT / "samples" / "resnet_block.train.symbolic.json"


def test_a_symbolic_graph_gets_the_symbolic_plan_the_cli_writes(tmp_path):
    out = tmp_path / "sym.json"
    code, _, err = cli("plan", str(SYMBOLIC), "--max-pieces", "4", "-o", str(out))
    assert code == 0, err
    sp = memplan.plan(SYMBOLIC, max_pieces=4)
    assert isinstance(sp, memplan.SymbolicPlan)
    assert json.loads(sp.to_json()) == json.loads(out.read_text())
    assert sp.symbols == {"B": (1, 32)}
    assert memplan.SymbolicPlan.load(out).to_dict() == sp.to_dict()


def test_a_symbolic_plan_instantiates_to_a_valid_plan_of_the_graph_at_the_binding():
    sp = memplan.plan(SYMBOLIC)
    for b in (1, 7, 32):
        p = sp.instantiate(B=b)
        assert isinstance(p, memplan.Plan)
        assert p.peak_bytes == sp.peak_at(B=b)
        assert p.check(p.graph)["valid"] is True
    assert sp.peak_at(B=1) < sp.peak_at(B=32)
    rows = sp.profile()
    assert [r["binding"]["B"] for r in rows][0] == 1 and rows[-1]["binding"]["B"] == 32
    for r in rows:
        assert r["peak_bytes"] == sp.peak_at(**r["binding"])
        assert r["ratio"] == pytest.approx(r["peak_bytes"] / r["per_binding_bytes"])
    if sp.pieces:
        assert sp.pieces[0][1] == 1 and sp.pieces[-1][2] == 32


def test_bad_bindings_and_switches_raise_bad_input_naming_them():
    sp = memplan.plan(SYMBOLIC, max_pieces=1)
    assert sp.pieces == []
    with pytest.raises(memplan.BadInputError, match=r"\"B\" = 33 is out of its range 1..=32"):
        sp.instantiate(B=33)
    with pytest.raises(memplan.BadInputError, match=r"symbol \"S\" is not declared"):
        sp.peak_at(B=1, S=2)
    with pytest.raises(memplan.BadInputError, match=r"B=-1: expected a non-negative integer"):
        sp.instantiate(B=-1)
    with pytest.raises(memplan.BadInputError, match=r"max_pieces applies to symbolic graphs"):
        memplan.plan(SAMPLE, max_pieces=2)
    with pytest.raises(memplan.BadInputError, match=r"a budget is not supported"):
        memplan.plan(SYMBOLIC, budget="80%")
    with pytest.raises(memplan.BadInputError, match=r"several streams \(streams\) are not supported"):
        memplan.plan(SYMBOLIC, streams=2)
    with pytest.raises(memplan.BadInputError, match=r"max_ratio"):
        memplan.plan(SYMBOLIC, max_ratio=0.5)


def test_reserve_gives_the_cli_report_for_a_histogram_csv_or_listed_sample(tmp_path):
    plan_path = tmp_path / "sym.json"
    code, _, err = cli("plan", str(SYMBOLIC), "-o", str(plan_path))
    assert code == 0, err
    hist = {"B": {"1": 320, "2": 160, "4": 80, "8": 40, "16": 20, "32": 1}}
    hist_path = tmp_path / "hist.json"
    hist_path.write_text(json.dumps(hist))
    out = tmp_path / "res.json"
    code, _, err = cli("reserve", str(plan_path), str(hist_path), "--split", "B", "--batching",
                       "--requests", "500", "--graph", str(SYMBOLIC), "-o", str(out))
    assert code == 0, err
    ours = memplan.reserve(memplan.SymbolicPlan.load(plan_path), hist, split="B", batching=True,
                           requests=500, graph=SYMBOLIC)
    assert ours == json.loads(out.read_text())
    assert ours["fallback_plans"][0]["binding"] == {"B": 32}
    assert ours["batching"]["average_utilisation"] > ours["average_utilisation"]
    # The same distribution as CSV text or a listed sample: the same reservation.
    csv = "B,weight\n" + "".join(f"{b},{w}\n" for b, w in hist["B"].items())
    listed = {"B": [int(b) for b, w in hist["B"].items() for _ in range(w)]}
    for dist in (csv, listed, str(hist_path)):
        r = memplan.reserve(plan_path, dist)
        assert r["reserved_bytes"] == ours["reserved_bytes"]
    with pytest.raises(memplan.BadInputError, match="batching merges requests along the split"):
        memplan.reserve(plan_path, hist, batching=True)
    with pytest.raises(memplan.BadInputError, match="quantile 2 is not in"):
        memplan.reserve(plan_path, hist, quantile=2)
    # Integers out of range are bad input naming the argument (were OverflowError / TypeError).
    for name, value in (("seed", -1), ("window", -1), ("requests", 2**70), ("seed", "0")):
        with pytest.raises(memplan.BadInputError, match=f"{name} .* is not a non-negative integer"):
            memplan.reserve(plan_path, hist, **{name: value})
    assert memplan.reserve(plan_path, hist, seed=None) == memplan.reserve(plan_path, hist)
    # A graph the plan was not made for is the graph's mistake, named as the graph.
    other = json.loads(SYMBOLIC.read_text())
    other["name"] = other["name"] + "-other"
    with pytest.raises(memplan.BadInputError, match=r"^graph: .*the plan is for graph"):
        memplan.reserve(plan_path, hist, graph=other)


def test_streams_give_the_cli_parallel_plan_for_the_same_options(tmp_path):
    out = tmp_path / "p.json"
    code, _, err = cli("plan", str(SAMPLE), "--streams", "2", "--stream-peak-ratio", "2", "-o", str(out))
    assert code == 0, err
    plan = memplan.plan(SAMPLE, streams=2, stream_peak_ratio=2.0)
    assert without_timing(plan.to_json()) == without_timing(out.read_text())
    assert plan.stats["streams"]["serial_makespan_us"] > 0
    plan.check(SAMPLE)
