"""Config search without services: the space, the objective, the Pareto front, strategies."""

from __future__ import annotations

import math

import pytest
from tritonclient.grpc import model_config_pb2 as pb

from profiler_app.search import objective, strategies
from profiler_app.search.objective import Constraints, Level, Point, pareto_front, score
from profiler_app.search.space import Knobs, Space, SpaceError, apply, diff, knobs_of
from repository_app.modelconfig import parse_config

BUSY = """
name: "busy_compute"
backend: "python"
max_batch_size: 32
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 64 ] } ]
dynamic_batching { max_queue_delay_microseconds: 200 preserve_ordering: true }
instance_group [ { name: "g" count: 1 kind: KIND_CPU } ]
parameters [ { key: "compute_ms_per_batch" value: { string_value: "1.0" } } ]
"""


def _config() -> pb.ModelConfig:
    parsed = parse_config(BUSY)
    assert parsed.config is not None
    return parsed.config


# --- space ------------------------------------------------------------------------------------


def test_knobs_of_reads_the_current_config_and_keys_are_canonical():
    knobs = knobs_of(_config())
    assert knobs == Knobs(1, "KIND_CPU", 32, True, 200, ())
    assert knobs.key == "1xCPU/mbs32/dyn200p"
    off = Knobs(2, "KIND_CPU", 8, False, 500, (4, 8))
    assert off.key == Knobs(2, "KIND_CPU", 8, False).key == "2xCPU/mbs8/off"
    assert Knobs.from_json(off.to_json()) == off.canonical()


def test_apply_sets_only_the_knobs_and_keeps_everything_else():
    base = _config()
    out = apply(base, Knobs(3, "KIND_CPU", 16, True, 100, (4, 8)))
    assert [(g.name, g.count) for g in out.instance_group] == [("g", 3)]
    assert out.max_batch_size == 16
    assert out.dynamic_batching.max_queue_delay_microseconds == 100
    assert list(out.dynamic_batching.preferred_batch_size) == [4, 8]
    assert out.dynamic_batching.preserve_ordering  # untouched field kept
    assert out.parameters["compute_ms_per_batch"].string_value == "1.0"
    assert base.instance_group[0].count == 1, "the base is not modified"
    off = apply(base, Knobs(1, "KIND_GPU", 32, False))
    assert not off.HasField("dynamic_batching")
    assert pb.ModelInstanceGroup.Kind.Name(off.instance_group[0].kind) == "KIND_GPU"


def test_diff_names_each_change_against_the_current_config():
    current = Knobs(1, "KIND_CPU", 32, True, 200, ())
    assert diff(current, current) == []
    assert diff(current, Knobs(2, "KIND_CPU", 32, True, 100, (8,))) == [
        "instances 1×CPU → 2×CPU",
        "max_queue_delay 200 → 100 µs",
        "preferred_batch_size [] → [8]",
    ]
    assert diff(current, Knobs(1, "KIND_CPU", 8, False)) == [
        "max_batch_size 32 → 8",
        "dynamic batching on → off",
    ]


def test_grid_is_the_product_of_the_values_without_duplicates():
    space = Space(
        counts=(1, 2),
        max_batch_sizes=(8, 32),
        batching_off=True,
        batching_on=True,
        delays_us=(0, 100),
        preferred=((), (4,)),
    )
    grid = space.dimensions(knobs_of(_config())).grid()
    # 2 counts x 2 mbs x (off + 2 delays x 2 preferred)
    assert len(grid) == 2 * 2 * (1 + 2 * 2) == len({k.key for k in grid})


def test_unset_values_keep_the_current_ones_and_bad_spaces_are_refused():
    dims = Space(counts=(1, 2)).dimensions(knobs_of(_config()))
    assert [k.key for k in dims.grid()] == ["1xCPU/mbs32/dyn200p", "2xCPU/mbs32/dyn200p"]
    with pytest.raises(SpaceError):
        Space(counts=(0,))
    with pytest.raises(SpaceError):
        Space(batching_off=False, batching_on=False)
    with pytest.raises(SpaceError):
        Space(kind="KIND_TPU")


def test_nearest_point_and_neighbours_skip_steps_that_change_nothing():
    space = Space(
        counts=(1, 2, 4), batching_off=True, delays_us=(0, 100, 1000), preferred=((), (8,))
    )
    dims = space.dimensions(knobs_of(_config()))
    point = dims.nearest(knobs_of(_config()))  # 200 µs lies nearest 100 µs
    assert dims.knobs(point).key == "1xCPU/mbs32/dyn100p"
    off = (0, 0, 0, 0)
    assert dims.knobs(off).key == "1xCPU/mbs32/off"
    assert dims.neighbours(off, 3, 1) is None, "preferred sizes do nothing while batching is off"
    assert dims.neighbours(off, 0, -1) is None
    assert dims.knobs(dims.neighbours(off, 2, 1)).key == "1xCPU/mbs32/dyn0p"


# --- objective --------------------------------------------------------------------------------


def test_max_throughput_picks_the_best_level_within_the_budget():
    c = Constraints(latency_budget_ms=5)
    s = score([Level(1, 100, 1000), Level(4, 300, 4000), Level(8, 400, 9000)], c, "max_throughput")
    assert s.feasible and s.objective == 300 and s.level.concurrency == 4


def test_min_latency_picks_the_lowest_latency_at_the_floor():
    c = Constraints(min_throughput=250)
    s = score([Level(1, 100, 1000), Level(4, 300, 4000), Level(8, 400, 9000)], c, "min_latency")
    assert s.feasible and s.objective == 4000 and s.level.concurrency == 4


def test_infeasible_candidates_rank_below_feasible_ones_by_how_far_they_miss():
    c = Constraints(latency_budget_ms=2, min_throughput=100)
    near = score([Level(1, 150, 2500)], c, "max_throughput")
    far = score([Level(1, 150, 8000)], c, "max_throughput")
    ok = score([Level(1, 101, 1900)], c, "max_throughput")
    assert not near.feasible and not far.feasible and ok.feasible
    assert "over the 2 ms budget" in near.reason
    assert ok.better_than(near) and near.better_than(far) and not far.better_than(near)
    assert score([], c, "max_throughput") is None
    ranked = objective.rank([("far", far), ("none", None), ("ok", ok), ("near", near)])
    assert [name for name, _ in ranked] == ["ok", "near", "far", "none"]


def test_gpu_memory_limit_is_a_constraint_when_memory_is_known():
    c = Constraints(gpu_memory_limit_mb=1000)
    assert not score([Level(1, 100, 10)], c, "max_throughput", gpu_memory_mb=1500).feasible
    assert score([Level(1, 100, 10)], c, "max_throughput", gpu_memory_mb=900).feasible
    assert score([Level(1, 100, 10)], c, "max_throughput", gpu_memory_mb=None).feasible


def test_gain_sentence_names_the_factor_the_latency_and_the_budget():
    c = Constraints(latency_budget_ms=5)
    best = score([Level(4, 3100, 2900)], c, "max_throughput")
    base = score([Level(4, 1000, 1500)], c, "max_throughput")
    text = objective.gain_sentence("2 GPU instances", best, base, c, "max_throughput")
    assert text.startswith("2 GPU instances: 3.1× throughput")
    assert "p95 2.90 ms" in text and "within the 5 ms budget" in text


# --- Pareto front -----------------------------------------------------------------------------


def test_pareto_front_keeps_only_undominated_points_sorted_by_latency():
    pts = [
        Point(100, 1),
        Point(90, 2),
        Point(200, 3),
        Point(150, 4),
        Point(300, 10),
        Point(300, 12),
    ]
    assert [(p.throughput, p.latency_us) for p in pareto_front(pts)] == [
        (100, 1),
        (200, 3),
        (300, 10),
    ]


def test_pareto_front_edge_cases():
    assert pareto_front([]) == []
    same = [Point(5, 5, "a"), Point(5, 5, "b")]
    assert [p.payload for p in pareto_front(same)] == ["a"]
    line = [Point(i, i) for i in range(1, 6)]  # more throughput always costs latency
    assert len(pareto_front(line)) == 5


# --- strategies on synthetic surfaces ---------------------------------------------------------

BIG = Space(
    counts=(1, 2, 3, 4),
    max_batch_sizes=(4, 8, 16, 32, 64),
    batching_off=True,
    batching_on=True,
    delays_us=(0, 100, 500, 2000),
    preferred=((), (8,), (16,)),
)
START = Knobs(1, "KIND_CPU", 32, True, 200, ())


BUDGET_5MS = Constraints(latency_budget_ms=5)


def _surface(fn, constraints=BUDGET_5MS):
    calls: list[str] = []

    def evaluate(k: Knobs):
        calls.append(k.key)
        tput, lat_us = fn(k)
        if tput is None:
            return None
        return score([Level(8, tput, lat_us)], constraints, "max_throughput")

    return evaluate, calls


def realistic(k: Knobs, concurrency: int = 8, cores: int = 2) -> tuple[float, float]:
    """busy_compute on a small machine: 1 ms + 50 µs/item per execute, a Python backend
    overhead per execute, instances beyond the cores contend, the client needs a core."""
    per_instance = concurrency / k.count
    batch = 1.0
    if k.batching:
        fill = min(1.0, 0.3 + k.delay_us / 500)
        batch = max(1.0, min(k.max_batch_size, per_instance * fill))
        if k.preferred and k.preferred[0] <= per_instance:
            batch = min(batch * 1.05, k.max_batch_size)
    execute_s = 0.0013 + 0.00005 * batch
    parallel = min(k.count, cores - 0.5)
    contention = 1 + 0.08 * max(0, k.count - cores)
    tput = parallel * batch / (execute_s * contention)
    latency_us = concurrency / tput * 1e6 + (k.delay_us * 0.5 if k.batching else 0)
    return tput, latency_us


@pytest.mark.parametrize(
    "name,fn",
    [
        (
            "separable bowl",
            lambda k: (1000 - 40 * (k.count - 3) ** 2 - 3 * abs(k.max_batch_size - 16), 1000),
        ),
        (
            "batching on is better",
            lambda k: (500 + (300 if k.batching else 0) + 10 * k.count, 1000),
        ),
        ("realistic", realistic),
    ],
)
def test_hill_climbing_finds_the_grid_optimum_within_5_percent_in_a_third_of_the_runs(name, fn):
    dims = BIG.dimensions(START)
    g_eval, g_calls = _surface(fn)
    grid = strategies.grid(dims, START, g_eval)
    q_eval, q_calls = _surface(fn)
    quick = strategies.hill_climb(dims, START, q_eval)
    g_best, q_best = grid.best(), quick.best()
    assert g_best is not None and q_best is not None
    assert len(g_calls) == grid.runs == strategies.grid_runs(dims, START)
    assert len(q_calls) == quick.runs == len(set(q_calls)), "each candidate measured once"
    assert quick.runs * 3 <= grid.runs, f"{name}: {quick.runs} runs vs grid {grid.runs}"
    assert q_best[1].objective >= 0.95 * g_best[1].objective, name


def test_hill_climbing_walks_from_an_infeasible_start_toward_feasibility():
    # Latency falls with instances; only 3+ instances meet the 5 ms budget.
    def fn(k: Knobs):
        return 100 * k.count, 12000 / k.count

    dims = BIG.dimensions(START)
    evaluate, _ = _surface(fn)
    trace = strategies.hill_climb(dims, START, evaluate)
    best = trace.best()
    assert best is not None and best[1].feasible and best[0].count == 4


def test_hill_climbing_stops_at_its_budget_and_survives_failed_candidates():
    def fn(k: Knobs):
        return (None, None) if not k.batching else (100.0 + k.count, 1000.0)

    dims = BIG.dimensions(START)
    evaluate, calls = _surface(fn)
    trace = strategies.hill_climb(dims, START, evaluate, max_runs=4)
    assert trace.runs == len(calls) <= 4
    assert trace.best() is not None


def test_a_stop_raised_by_evaluate_ends_the_strategy_keeping_what_was_measured():
    class Stop(Exception):
        pass

    seen: list[str] = []

    def evaluate(k: Knobs):
        if len(seen) == 3:
            raise Stop
        seen.append(k.key)
        return score([Level(1, 10.0, 10.0)], Constraints(), "max_throughput")

    with pytest.raises(Stop):
        strategies.grid(BIG.dimensions(START), START, evaluate)
    assert len(seen) == 3


def test_resumed_strategies_ask_for_the_same_candidates_in_the_same_order():
    dims = BIG.dimensions(START)
    first, _ = _surface(realistic)
    again, _ = _surface(realistic)
    assert (
        strategies.hill_climb(dims, START, first).order
        == strategies.hill_climb(dims, START, again).order
    )
    assert math.isclose(
        strategies.quick_budget(dims, START), strategies.grid_runs(dims, START) // 3
    )
