"""The slot table: which claimed job holds which engine slot, and what each step
adds to its stream (ADR 0147).

Pure bookkeeping around an :class:`~workers.generate.engine.Engine`: admitting a
claimed job (its input parsed, the engine's refusal turned into a failed job),
turning one step's outputs into the step round trip's ``Append`` and ``Finished``
records, and dropping the jobs the queue says are no longer ours. No Redis, no
clock of its own: every method takes ``now`` (monotonic seconds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sluice.generate.ops import Append, Finished
from sluice.generate.params import GenerateInput, GenerateResult
from sluice.jobs import ClaimedJob
from workers.generate.engine import Engine, StepOutput

INVALID_INPUT = "invalid_input"
ENGINE_ERROR = "engine_error"


@dataclass
class Seq:
    """One claimed job in a slot: its run (attempt) and what it produced so far."""

    job_id: str
    attempt: int
    prompt_tokens: int
    claimed_s: float  # monotonic, when the claim's reply came
    waited_s: float  # enqueue to claim, by the server's clock
    ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    started: bool = False  # its first Append (START/RESTART) has been built
    first_token_s: float | None = None
    last_token_s: float | None = None

    def result(self, reason: str) -> GenerateResult:
        return GenerateResult(
            text="".join(self.texts),
            token_ids=tuple(self.ids),
            finish_reason=reason,  # type: ignore[arg-type]
            prompt_tokens=self.prompt_tokens,
            attempt=self.attempt,
        )


@dataclass
class StepNews:
    """What one engine step means for the queue and the metrics."""

    appends: list[Append] = field(default_factory=list)
    finished: list[Finished] = field(default_factory=list)
    tokens: int = 0  # output tokens this step
    ttft_s: list[float] = field(default_factory=list)  # enqueue to first token
    inter_token_s: list[float] = field(default_factory=list)  # one per token after a first
    reasons: list[str] = field(default_factory=list)  # finish reasons of ended sequences


def parse_input(job: ClaimedJob) -> GenerateInput:
    """The job's GenerateInput; ValueError with what is wrong."""
    if job.malformed:
        raise ValueError(job.malformed)
    if not isinstance(job.input, dict):
        raise ValueError("the input must be an object with prompt_ids and sampling")
    try:
        return GenerateInput.from_dict(job.input)
    except (KeyError, TypeError, ValueError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"not a generative job's input: {what}") from e


class SlotTable:
    """The engine's sequences by job id, in the order they were admitted."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seqs: dict[str, Seq] = {}

    @property
    def active(self) -> int:
        return len(self.seqs)

    @property
    def free(self) -> int:
        return max(0, self.engine.slots - len(self.seqs))

    def prefilling(self) -> bool:
        """Whether a sequence has not produced its first token yet (the next step
        prefills a prompt chunk)."""
        return any(s.first_token_s is None for s in self.seqs.values())

    def admit(self, job: ClaimedJob, now: float, waited_s: float) -> Finished | None:
        """Add a claimed job to the engine; a Finished with the reason if it cannot
        run (malformed input, or an engine refusal such as prompt + max_tokens above
        the slot's budget). RuntimeError (no slot free) is left to the caller."""
        try:
            gen = parse_input(job)
            self.engine.add(job.id, gen.prompt_ids, gen.sampling)
        except ValueError as e:
            return Finished(job.id, job.attempts, None, f"{INVALID_INPUT}: {e}"[:500])
        self.seqs[job.id] = Seq(job.id, job.attempts, len(gen.prompt_ids), now, waited_s)
        return None

    def drop(self, job_ids: set[str] | frozenset[str]) -> list[str]:
        """Abort these sequences (cancelled, or the lease is lost): no output follows
        and their slots are free at once. Returns the ids that were active."""
        dropped = [j for j in job_ids if j in self.seqs]
        for job_id in dropped:
            self.engine.abort(job_id)
            del self.seqs[job_id]
        return dropped

    def collect(self, outputs: list[StepOutput], now: float) -> StepNews:
        """One step's outputs as one Append per active sequence (empty when it made
        no token this step: the step script renews and checks the lease of exactly
        the appended jobs; a sequence's first says its run started) and a Finished
        for each that ended (it leaves its slot)."""
        news = StepNews()
        by_id = {o.seq_id: o for o in outputs}
        for seq in list(self.seqs.values()):
            out = by_id.get(seq.job_id)
            ids = tuple(out.token_ids) if out is not None else ()
            text = out.text if out is not None else ""
            news.appends.append(
                Append(seq.job_id, seq.attempt, len(seq.ids), ids, text, started=not seq.started)
            )
            seq.started = True
            if ids:
                self._tokens(seq, ids, text, now, news)
            elif text:  # a text-only flush (the detokenizer's tail): the result has it too
                seq.texts.append(text)
            if out is not None and (out.error is not None or out.finished is not None):
                news.finished.append(self._end(seq, out))
                news.reasons.append("error" if out.error is not None else str(out.finished))
                del self.seqs[seq.job_id]
        return news

    def _tokens(
        self, seq: Seq, ids: tuple[int, ...], text: str, now: float, news: StepNews
    ) -> None:
        if seq.last_token_s is None:
            seq.first_token_s = now
            news.ttft_s.append(seq.waited_s + (now - seq.claimed_s))
        else:
            news.inter_token_s.extend([(now - seq.last_token_s) / len(ids)] * len(ids))
        seq.last_token_s = now
        seq.ids.extend(ids)
        seq.texts.append(text)
        news.tokens += len(ids)

    def _end(self, seq: Seq, out: StepOutput) -> Finished:
        if out.error is not None:  # this run failed, the job may not: retried
            error = f"{ENGINE_ERROR}: {out.error}"[:500]
            return Finished(seq.job_id, seq.attempt, None, error, retry=True)
        return Finished(seq.job_id, seq.attempt, seq.result(str(out.finished)))

    def clear(self) -> list[Seq]:
        """Abort every sequence (the loop is giving them back)."""
        seqs = list(self.seqs.values())
        for seq in seqs:
            self.engine.abort(seq.job_id)
        self.seqs.clear()
        return seqs
