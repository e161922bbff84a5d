"""perf_analyzer, the reference load generator: run it for a sweep, streaming its windows
and levels as it prints them.

Where the binary is and its command line are `perf_analyzer_command`; reading what it
prints, `perf_analyzer_output`; its -f CSV (and ours in its shape), `perf_analyzer_csv`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from triton_api.aio import AioClient
from triton_api.client import TritonError
from triton_api.connection import Connection, as_connection

from ..params import SweepError, SweepParams
from . import composing
from .callbacks import call
from .perf_analyzer_command import build_command, locate_perf_analyzer, perf_analyzer_env
from .perf_analyzer_csv import parse_csv
from .perf_analyzer_output import PaLevel, PaWindow, StdoutParser

STDERR_TAIL = 5  # stderr lines kept to explain a run that failed without a known message


@dataclass
class PaResult:
    command: list[str]
    returncode: int
    levels: list[PaLevel]  # from stdout, in run order, including unstable ones
    csv_rows: list[dict[str, float]]  # from the CSV, sorted by level
    errors: list[str]
    cancelled: bool = False
    cpu_seconds: float = 0.0  # perf_analyzer's own user+system CPU time
    plan: composing.Plan = composing.NONE  # the composing models it was given or found

    @property
    def ok(self) -> bool:
        """Exited 0, or stopped on an unstable/over-threshold level after reporting levels."""
        return self.returncode == 0 or (self.returncode == 2 and not self.errors)


async def run_perf_analyzer(
    params: SweepParams,
    triton: Connection | str,
    *,
    on_window: Callable[[PaWindow], Any] | None = None,
    on_level: Callable[[PaLevel], Any] | None = None,
    should_cancel: Callable[[], Any] | None = None,
    binary: Path | None = None,
) -> PaResult:
    """Run perf_analyzer for `params`, streaming windows and levels as it prints them.
    A BLS model's declared calls are passed as --bls-composing-models."""
    binary = binary or locate_perf_analyzer()
    triton = as_connection(triton, params.protocol)
    plan = await composing_plan(params, triton)
    with tempfile.TemporaryDirectory(prefix="perf_analyzer-") as tmp:
        csv_path = Path(tmp) / "result.csv"
        data_path = None
        if params.input_data not in ("random", "zeros"):
            data_path = Path(tmp) / "input.json"
            source = params.input_data
            if isinstance(source, str) and not source.lstrip().startswith("{"):
                data_path = Path(source)
            else:
                data_path.write_text(source if isinstance(source, str) else json.dumps(source))
        command = build_command(
            params,
            triton.url,
            binary=binary,
            csv_path=csv_path,
            input_data_path=data_path,
            bls_composing_models=[c.spec for c in plan.calls],
        )
        usage_before = os.times()
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=perf_analyzer_env(binary),
        )
        parser = StdoutParser(plan)
        cancelled = False
        # The last lines of stderr: a run that dies before its first level (a missing
        # library, a refused option) says why only there, in no format the parser knows.
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)

        async def pump(stream: asyncio.StreamReader, tail: collections.deque[str] | None) -> None:
            while line := await stream.readline():
                text = line.decode(errors="replace")
                if tail is not None and text.strip():
                    tail.append(text.strip())
                for event in parser.feed(text):
                    if isinstance(event, PaWindow):
                        await call(on_window, event)
                    else:
                        await call(on_level, event)

        async def watch() -> None:
            nonlocal cancelled
            while proc.returncode is None:
                await asyncio.sleep(0.1)
                if should_cancel is not None and await call(should_cancel):
                    cancelled = True
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
                    return

        assert proc.stdout is not None and proc.stderr is not None
        watcher = asyncio.create_task(watch())
        await asyncio.gather(pump(proc.stdout, None), pump(proc.stderr, stderr_tail))
        returncode = await proc.wait()
        watcher.cancel()
        for event in parser.close():
            await call(on_level, event)
        usage_after = os.times()
        rows = parse_csv(csv_path.read_text()) if csv_path.exists() else []
    cpu = (usage_after.children_user - usage_before.children_user) + (
        usage_after.children_system - usage_before.children_system
    )
    errors = parser.errors
    if not errors and returncode not in (0, 2) and not cancelled:
        errors = list(stderr_tail) or [f"perf_analyzer exited with {returncode}"]
    return PaResult(command, returncode, parser.levels, rows, errors, cancelled, cpu, plan)


async def composing_plan(params: SweepParams, triton: Connection) -> composing.Plan:
    """The model's composing models (`composing.plan`), for the step order and a BLS
    model's --bls-composing-models. A Triton that does not answer gives none (perf_analyzer
    then says what is wrong); a composing model that cannot be measured is a SweepError."""
    control = AioClient(triton)
    try:
        config = await control.config(params.model, params.version)
        return await composing.plan(control, params.model, config)
    except TritonError:
        return composing.NONE
    except composing.StepError as exc:
        raise SweepError(str(exc)) from None
    finally:
        await control.close()


def total_requests(result: PaResult) -> int:
    """Requests perf_analyzer reported across its levels (for CPU per request)."""
    return sum(level.request_count for level in result.levels)
