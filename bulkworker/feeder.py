"""Turning stored lines into jobs (pure): parse, estimate, or fail the line alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sluice.bulk.lines import custom_id_of, error_of, output_line, parse_line
from sluice.bulk.ops import item_job_id
from sluice.cost import CostEstimator
from sluice.errors import InputTooLarge, InvalidInput
from sluice.jobs import BULK, JobRecord, JobStatus, NewJob


@dataclass(slots=True)
class Chunk:
    """What a run of lines becomes: jobs to submit, and lines that failed already."""

    jobs: list[NewJob] = field(default_factory=list)
    indexes: list[int] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)  # (index, output line)

    @property
    def cost(self) -> int:
        return sum(j.cost for j in self.jobs)


def build_chunk(bulk_id: str, start: int, lines: list[str], est: CostEstimator) -> Chunk:
    """Lines ``start..`` as bulk-class jobs with stable ids; a line that does not
    parse or is too large fails alone, with a line of output saying why."""
    chunk = Chunk()
    for offset, text in enumerate(lines):
        index = start + offset
        try:
            line = parse_line(text)
            e = est.estimate(line.input)
        except (InvalidInput, InputTooLarge) as err:
            out = output_line(index + 1, custom_id_of(text), "failed", error=error_of(err))
            chunk.failed.append((index, out))
            continue
        meta: dict[str, Any] = {"bulk": bulk_id, "line": index + 1}
        if line.custom_id is not None:
            meta["custom_id"] = line.custom_id
        chunk.jobs.append(
            NewJob(
                input=line.input,
                bucket=e.bucket,
                cost=e.cost,
                priority=BULK,
                metadata=meta,
                id=item_job_id(bulk_id, index),
            )
        )
        chunk.indexes.append(index)
    return chunk


def outcome_line(index: int, rec: JobRecord) -> tuple[str, bool]:
    """The output line of an ended job, and whether it succeeded."""
    cid = (rec.metadata or {}).get("custom_id")
    if rec.status is JobStatus.SUCCEEDED:
        return output_line(index + 1, cid, "succeeded", result=rec.result), True
    error = rec.error or {"type": rec.status.value, "message": f"the job {rec.status.value}"}
    return output_line(index + 1, cid, rec.status.value, error=error), False
