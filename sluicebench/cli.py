"""Every ``sluice bench ...`` command: the measurement package's one entry.

sluice/cli.py lists this module among its plugins; nothing else in the product
imports sluicebench. Commands import their benchmark inside, so ``sluice --help``
stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    ConfigOpt,
    JsonOpt,
    fail,
    load_required,
    write_json,
)
from sluice.errors import ConfigError, SluiceError

BENCH_CONFIG = Path(__file__).resolve().parent.parent / "bench" / "autoscaler_sim.yaml"
# Benchmarks kept as argparse programs: ``sluice bench NAME ARGS`` hands ARGS over.
SCRIPTS = {
    "bulk": "bulk",
    "faults": "faults",
    "dashboard": "dashboard",
    "claim-check": "claim_check",
    "strict-json": "strict_json",
    "padding": "padding",
}


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    from sluicebench.cost_cli import cost_cmd
    from sluicebench.generate.command import generate_cmd
    from sluicebench.loadgen.commands import load_cmd, stack_cmd
    from sluicebench.loadgen.soak_cli import soak_cmd
    from sluicebench.scripts.auth_submit import cli as auth_submit_cmd

    bench_app.command("queue")(bench_queue)
    bench_app.command("cost")(cost_cmd)
    bench_app.command("gateway")(bench_cmd)
    bench_app.command("gateway-stall")(bench_stall_cmd)
    bench_app.command("worker")(bench_worker_cmd)
    bench_app.command("worker-fleet")(bench_fleet_cmd)
    bench_app.command("autoscaler")(bench_autoscaler_cmd)
    bench_app.command("dispatch")(bench_dispatch_cmd)
    bench_app.command("warm-pool")(bench_warm_pool_cmd)
    bench_app.command("cold-start")(bench_cold_start_cmd)
    bench_app.command("load")(load_cmd)
    bench_app.command("stack")(stack_cmd)
    bench_app.command("e2e")(e2e_cmd)
    bench_app.command("generate")(generate_cmd)
    bench_app.command("json")(json_cmd)
    bench_app.command("soak")(soak_cmd)
    bench_app.command("auth-submit")(auth_submit_cmd)
    bench_app.command("webhooks")(webhooks_cmd)
    bench_app.command("hop-ab")(hop_ab_cmd)
    bench_app.command("redis-ha")(redis_ha_cmd)
    for name, module in SCRIPTS.items():
        bench_app.command(name, **_PASS_THROUGH)(_script_cmd(module))


_PASS_THROUGH: dict[str, Any] = {
    "context_settings": {"allow_extra_args": True, "ignore_unknown_options": True},
    "add_help_option": False,
}


def _script_cmd(module: str) -> Any:
    def run(ctx: typer.Context) -> None:
        import importlib

        importlib.import_module(f"sluicebench.scripts.{module}").main(list(ctx.args))

    run.__doc__ = _first_doc_line(module)
    return run


def _first_doc_line(module: str) -> str:
    """The script's summary line, read without importing it (``sluice --help`` stays fast)."""
    import ast

    path = Path(__file__).resolve().parent / "scripts" / f"{module}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.splitlines()[0] + " (--help for its options)" if doc else ""


def e2e_cmd(
    texts: Annotated[
        int, typer.Option(help="Mixed-length texts (70/25/5% short/medium/long).")
    ] = 2000,
    concurrency: Annotated[int, typer.Option(help="Closed loop: calls outstanding.")] = 64,
    open_fraction: Annotated[
        float, typer.Option(help="Open loop: Poisson rate as a fraction of (b)'s closed loop.")
    ] = 0.7,
    open_s: Annotated[float, typer.Option(help="Open loop: seconds of arrivals.")] = 20.0,
    warm_s: Annotated[float, typer.Option(help="Closed-loop warm-up before measuring.")] = 30.0,
    systems: Annotated[
        str, typer.Option(help="Comma list of example, best, in_process, microbatcher.")
    ] = "example,best,in_process,microbatcher",
    best_config: Annotated[Path, typer.Option(help="System (b)'s config.")] = Path(
        "bench/e2e_best.yaml"
    ),
    seed: Annotated[int, typer.Option(help="Workload and arrival seed.")] = 1,
    log_dir: Annotated[Path, typer.Option(help="The stacks' logs.")] = Path(
        "bench/results/e2e-logs"
    ),
    json_path: JsonOpt = None,
) -> None:
    """MiniLM end to end: the example config vs the best vs the in-process limit vs a
    FastAPI micro-batcher, closed and open loop, per-class p50/p99, CPU and RSS."""
    from sluicebench.e2e_bench import E2EParams, render, run_e2e

    chosen = tuple(s.strip() for s in systems.split(",") if s.strip())
    known = {"example", "best", "in_process", "microbatcher"}
    if not chosen or set(chosen) - known:
        fail(f"--systems: choose from {sorted(known)}", 2)
    params = E2EParams(
        texts=texts,
        concurrency=concurrency,
        open_fraction=open_fraction,
        open_s=open_s,
        warm_s=warm_s,
        seed=seed,
        systems=chosen,
        best_config=str(best_config),
    )
    data = run_e2e(params, log_dir, progress=_console().print)
    render(data, _console())
    write_json(json_path, data)


def json_cmd(
    dim: Annotated[int, typer.Option(help="Floats per embedding.")] = 384,
    json_path: JsonOpt = None,
) -> None:
    """The hot path's JSON per job: the standard library vs orjson (sluice/fastjson.py)."""
    from sluicebench.json_bench import render, run

    data = run(dim)
    render(data, _console())
    write_json(json_path, data)


def _console() -> Any:
    from sluicebench.loadgen.report import console

    return console()


def bench_cmd(
    rates: Annotated[str, typer.Option(help="Comma-separated offered rates (req/s).")] = "500,1000",
    duration_s: Annotated[float, typer.Option(help="Seconds per measured run.")] = 5.0,
    processes: Annotated[str, typer.Option(help="uvicorn process counts to compare.")] = "1,2",
    longpoll_rate: Annotated[float, typer.Option(help="Jobs/s in the long-poll test.")] = 500.0,
    json_path: JsonOpt = None,
    keys: Annotated[
        bool, typer.Option(help="Also the gateway with API keys configured, side by side.")
    ] = False,
) -> None:
    """Gateway submit throughput and latency vs a bare FastAPI+Redis endpoint; long-poll wake-up."""
    from sluicebench.gateway_bench import main

    main(
        rates=[float(r) for r in rates.split(",") if r],
        duration_s=duration_s,
        processes=[int(p) for p in processes.split(",") if p],
        longpoll_rate=longpoll_rate,
        json_path=json_path,
        keys=keys,
    )


def bench_stall_cmd(json_path: JsonOpt = None) -> None:
    """Longest event-loop gap while a large input is estimated: inline, thread, now."""
    from sluicebench.gateway_stall import main

    main(json_path=json_path)


def bench_worker_cmd(
    texts: Annotated[int, typer.Option(help="Texts per run.")] = 480,
    max_batch: Annotated[int, typer.Option(help="Batch size.")] = 32,
    seed: Annotated[int, typer.Option(help="Text generator seed.")] = 7,
    threads: Annotated[int, typer.Option(help="torch CPU threads (0 = default).")] = 0,
    rounds: Annotated[int, typer.Option(help="Rounds; ratios are per round, medians.")] = 3,
    json_path: JsonOpt = None,
) -> None:
    """MiniLM worker vs in-process batching, and size buckets vs one bucket."""
    from sluicebench.worker_bench import main as run

    run(
        texts=texts,
        max_batch=max_batch,
        seed=seed,
        threads=threads,
        rounds=rounds,
        json_path=json_path,
    )


def bench_fleet_cmd(
    workers: Annotated[int, typer.Option(help="Synthetic worker processes.")] = 20,
    jobs: Annotated[int, typer.Option(help="Jobs the fleet drains.")] = 2000,
    idle_s: Annotated[float, typer.Option(help="Seconds of idle CPU measured.")] = 5.0,
    json_path: JsonOpt = None,
) -> None:
    """Many synthetic workers on this machine: start-up, idle CPU, memory, drain, exit."""
    from sluicebench.worker_fleet import main as run

    run(workers=workers, jobs=jobs, idle_s=idle_s, json_path=json_path)


def bench_autoscaler_cmd(
    config: ConfigOpt = None,
    traces: Annotated[str, typer.Option(help="Comma-separated trace specs.")] = ",".join(
        ("step", "step:1.5", "spike", "spike:1.5", "diurnal", "noisy")
    ),
    json_path: JsonOpt = None,
) -> None:
    """Sluice's policy vs the oracle and three baselines on the built-in traces."""
    from autoscaler.sim import replay

    cfg = load_required(config or BENCH_CONFIG)
    try:
        _, mc = replay.pick_model(dict(cfg.models), None)
        out = replay.bench_cmd(mc, traces.split(","), list(replay.BENCH_POLICIES), None)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    write_json(json_path, out)


def bench_warm_pool_cmd(
    config: ConfigOpt = None,
    json_path: JsonOpt = None,
) -> None:
    """Warm pools and the predictive term in the simulator: the targets, the headroom a
    pool saves against target_utilization, prediction on ramps and noise (~1 min)."""
    from autoscaler.sim import replay
    from sluicebench.warm_pool_bench import main as run

    cfg = load_required(config or BENCH_CONFIG)
    try:
        _, mc = replay.pick_model(dict(cfg.models), None)
        out = run(mc)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    write_json(json_path, out)


def bench_cold_start_cmd(
    repeat: Annotated[int, typer.Option(help="Worker starts per loader.")] = 3,
    jobs: Annotated[int, typer.Option(help="Jobs in the burst.")] = 3000,
    log_dir: Annotated[Path, typer.Option(help="The stacks' logs.")] = Path(
        "bench/results/cold-start-logs"
    ),
    json_path: JsonOpt = None,
) -> None:
    """A MiniLM worker's start path (transformers vs the native loader) and a burst
    served by a promoted worker vs a cold one on sluice up (~4 min)."""
    from sluicebench.cold_start_bench import main as run

    write_json(json_path, run(repeat, jobs, log_dir, json_path))


def bench_dispatch_cmd(
    config: ConfigOpt = None,
    json_path: JsonOpt = None,
) -> None:
    """Pull with buckets vs pull-fifo, round-robin, least-connections and power-of-two,
    on the mixed trace at 70% and 90% utilisation (simulated, about 2 s)."""
    from autoscaler.sim import dispatch, dispatch_report, replay

    cfg = load_required(config or BENCH_CONFIG)
    try:
        _, mc = replay.pick_model(dict(cfg.models), None)
        setup = dispatch_report.Setup(
            "mixed", dispatch.STRATEGIES, dispatch_report.BENCH_UTILIZATIONS
        )
        out = dispatch_report.dispatch_cmd(mc, setup, None)
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    write_json(json_path, out)


def bench_queue(
    jobs: Annotated[int, typer.Option(help="Jobs per run.")] = 10_000,
    rq_jobs: Annotated[int, typer.Option(help="Jobs for the RQ baseline.")] = 1_000,
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,8,32,128",
    workers: Annotated[str, typer.Option(help="Comma-separated worker process counts.")] = "1,4",
    json_path: JsonOpt = None,
    repeat: Annotated[int, typer.Option(help="Runs per case; the median is reported.")] = 3,
) -> None:
    """Queue hop: submit + claim + complete with a no-op handler, vs RQ on one server."""
    from sluicebench.queue_hop import main as run

    try:
        run(
            jobs=jobs,
            rq_jobs=rq_jobs,
            batch_sizes=batch_sizes,
            workers=workers,
            json_path=json_path,
            repeats=repeat,
        )
    except SluiceError as e:
        fail(str(e))  # inside the command, so typer turns the Exit into a clean exit code


def redis_ha_cmd(
    jobs: Annotated[int, typer.Option(help="Jobs per queue-hop round.")] = 3000,
    calls: Annotated[int, typer.Option(help="Single-job submits per round.")] = 2000,
    rounds: Annotated[int, typer.Option(help="Alternating rounds per comparison.")] = 6,
    failover_runs: Annotated[int, typer.Option(help="Failovers per durability setting.")] = 2,
    cluster_s: Annotated[float, typer.Option(help="Seconds per cluster round.")] = 5.0,
    json_path: JsonOpt = None,
) -> None:
    """Replication, Sentinel and Cluster: durability and Sentinel costs, failover
    times and losses, 3 models on 3 shards vs 1."""
    from sluicebench.redis_ha_bench import main

    main(jobs, calls, rounds, failover_runs, cluster_s, json_path)


def webhooks_cmd(
    hop_jobs: Annotated[int, typer.Option(help="Jobs per queue-hop round.")] = 5000,
    rounds: Annotated[int, typer.Option(help="Alternating rounds per comparison.")] = 4,
    duration_s: Annotated[float, typer.Option(help="Seconds per submit round and load.")] = 5.0,
    rate: Annotated[float, typer.Option(help="Jobs/s for the delivery latency.")] = 100.0,
    backlog: Annotated[int, typer.Option(help="Deliveries one notifier drains.")] = 2000,
    json_path: JsonOpt = None,
) -> None:
    """Webhooks: hot-path cost (queue hop, gateway submit; with vs without) and
    submit-to-webhook latency at a steady rate."""
    from sluicebench.webhook_bench import main

    main(
        hop_jobs=hop_jobs,
        rounds=rounds,
        duration_s=duration_s,
        rate=rate,
        json_path=json_path,
        backlog=backlog,
    )


def hop_ab_cmd(
    other: Annotated[Path, typer.Option(help="Another checkout (git worktree add DIR REV).")],
    jobs: Annotated[int, typer.Option(help="Jobs per round.")] = 5000,
    alternations: Annotated[int, typer.Option(help="Runs of each checkout (2 rounds each).")] = 6,
    json_path: JsonOpt = None,
) -> None:
    """The queue hop of this checkout vs another, alternating on one Redis (a ratio)."""
    from sluicebench.hop_ab import main

    if not (other / "sluice" / "queue").is_dir():
        fail(f"{other}: not a Sluice checkout", 2)
    main(other=other, jobs=jobs, alternations=alternations, json_path=json_path)
