"""``sluice autoscaler`` and ``sluice simulate``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sluice.cli_common import (
    EXIT_CONFIG,
    ConfigOpt,
    JsonOpt,
    RedisUrlOpt,
    check_redis,
    fail,
    load_required,
    redis_url,
    stop_event_on_signals,
    write_json,
)
from sluice.errors import ConfigError, SluiceError

if TYPE_CHECKING:
    from autoscaler.sim import dispatch_report

BENCH_CONFIG = Path(__file__).resolve().parent.parent / "bench" / "autoscaler_sim.yaml"


def autoscaler_cmd(
    config: ConfigOpt = None,
    backend: Annotated[
        str | None, typer.Option(help="local, kubernetes or dry-run (default: the file's).")
    ] = None,
    redis_url_opt: RedisUrlOpt = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Prometheus port (0 = none; default: the file's).")
    ] = None,
    log_level: Annotated[str, typer.Option(help="Logging level.")] = "INFO",
) -> None:
    """Scale each model's workers from queue backlog and p99 wait; reloads the file on change."""
    from autoscaler.service import BACKENDS, build

    cfg = load_required(config)
    assert config is not None
    which = backend or cfg.autoscaler.backend
    if which not in BACKENDS:
        fail(f"--backend {which!r}: use local, kubernetes or dry-run", EXIT_CONFIG)
    url = redis_url(redis_url_opt, cfg)
    check_redis(url, cfg)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    try:
        loop = build(cfg, config, url, which, metrics_port)
    except (SluiceError, OSError) as e:  # OSError: the metrics port is taken
        fail(str(e))
    stop = stop_event_on_signals()
    logging.getLogger("sluice.autoscaler").info(
        "autoscaler: %s backend, models %s", which, list(cfg.models)
    )
    loop.run(stop)


# `sluice simulate`'s options.
TraceOpt = Annotated[
    str | None,
    typer.Option(
        help="step, spike, diurnal, noisy, mixed (NAME:FACTOR) or a CSV of time_s,cost. "
        "Required for policies; with --dispatch the default is mixed."
    ),
]
ModelOpt = Annotated[str | None, typer.Option(help="Model (if the file has several).")]
PolicyOpt = Annotated[
    str,
    typer.Option(
        help="Comma-separated: sluice, fixed:N, queue-length[:T], "
        "ongoing[:T]. The oracle always runs."
    ),
]
ServiceRateOpt = Annotated[
    float | None,
    typer.Option(
        help="Cost units/s per replica (default: the model's configured or derived rate)."
    ),
]
ColdStartOpt = Annotated[
    float | None,
    typer.Option(help="Simulated cold start (default: the policy's cold_start_s)."),
]
CapacityOpt = Annotated[
    float | None,
    typer.Option(
        help="Cost units/s all replicas share (cores, one GPU): more replicas add no "
        "drain rate past it, and the saturation guard can cap them. Default: no limit."
    ),
]
PlotOpt = Annotated[Path | None, typer.Option(help="Draw replicas, queue, p99 to a PNG.")]
DispatchOpt = Annotated[
    str | None,
    typer.Option(
        help="Compare dispatch on fixed replicas instead of policies. Comma-separated: pull, "
        "pull-fifo, round-robin, least-connections, power-of-two."
    ),
]
ReplicasOpt = Annotated[int | None, typer.Option(help="--dispatch: workers (8); --generate: 1.")]
UtilizationOpt = Annotated[
    str, typer.Option(help="--dispatch with the mixed trace: comma-separated offered loads.")
]
JobsOpt = Annotated[
    int | None,
    typer.Option(help="--dispatch: jobs per mixed trace (40,000); --generate: jobs (2,000)."),
]
SeedOpt = Annotated[int, typer.Option(help="--dispatch and --generate: the workload's seed.")]
GenerateOpt = Annotated[
    str | None,
    typer.Option(
        help="Simulate a generative model's slots instead: comma-separated continuous, "
        "whole_batch; reports tokens/s, time to first token and inter-token time."
    ),
]
ConcurrencyOpt = Annotated[
    int | None, typer.Option(help="--generate: closed-loop clients (default 2 x all slots).")
]
RateOpt = Annotated[float | None, typer.Option(help="--generate: open loop, Poisson jobs/s.")]
StepMsOpt = Annotated[
    str | None,
    typer.Option(
        help="--generate: a step's ms as BASE,PER_SEQUENCE,PER_PROMPT_TOKEN "
        "(default: fitted to issue 30's CPU figures, 3.23,0.274,0.138)."
    ),
]


def _dispatch_setup(
    trace: str | None,
    dispatch: str,
    utilization: str,
    replicas: int | None,
    jobs: int | None,
    seed: int,
) -> dispatch_report.Setup:
    from autoscaler.sim import dispatch_report

    return dispatch_report.Setup(
        trace or "mixed",
        dispatch_report.parse_strategies(dispatch),
        dispatch_report.parse_utilizations(utilization),
        replicas or 8,
        jobs or 40_000,
        seed,
    )


def simulate_cmd(
    trace: TraceOpt = None,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    policy: PolicyOpt = "sluice",
    service_rate: ServiceRateOpt = None,
    cold_start_s: ColdStartOpt = None,
    capacity_cost_per_s: CapacityOpt = None,
    json_path: JsonOpt = None,
    plot: PlotOpt = None,
    dispatch: DispatchOpt = None,
    replicas: ReplicasOpt = None,
    utilization: UtilizationOpt = "0.7,0.9",
    jobs: JobsOpt = None,
    seed: SeedOpt = 5,
    generate: GenerateOpt = None,
    concurrency: ConcurrencyOpt = None,
    rate: RateOpt = None,
    step_ms: StepMsOpt = None,
) -> None:
    """Replay a trace through the policy (and baselines) before deploying it; or, with
    --dispatch, compare pull against push dispatch on the same trace and workers; or,
    with --generate, compare a generative model's slot admissions."""
    from autoscaler.sim import dispatch_report, replay
    from autoscaler.sim import generate as gen

    cfg = load_required(config)
    try:
        _, mc = replay.pick_model(dict(cfg.models), model)
        if generate is not None:
            admissions = gen.parse_admissions(generate)
            n = jobs or 2000
            load = gen.Load(replicas or 1, n, seed, concurrency, rate)
            out = gen.generate_cmd(mc, admissions, load, gen.parse_step_ms(step_ms))
        elif dispatch is not None:
            if plot is not None:
                raise ConfigError("--plot draws policy replays; --dispatch prints a table only")
            if capacity_cost_per_s is not None:
                raise ConfigError("--capacity-cost-per-s is for policy replays, not --dispatch")
            setup = _dispatch_setup(trace, dispatch, utilization, replicas, jobs, seed)
            out = dispatch_report.dispatch_cmd(mc, setup, service_rate)
        elif trace is None:
            raise ConfigError("--trace is required (or pass --dispatch)")
        else:
            out = replay.simulate_cmd(
                mc,
                trace,
                [p.strip() for p in policy.split(",") if p.strip()],
                service_rate,
                cold_start_s,
                plot,
                capacity_cost_per_s,
            )
    except ConfigError as e:
        fail(str(e), EXIT_CONFIG)
    write_json(json_path, out)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("autoscaler")(autoscaler_cmd)
    app.command("simulate")(simulate_cmd)
