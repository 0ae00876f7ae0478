"""Incremental detokenization with stop strings, for one sequence's output.

Tokens are fed one at a time; text comes out only when it is settled: never
half of a multi-byte UTF-8 character (a byte-level BPE token can end inside
one), and never text that might be the start of a stop string. The tokens are
held back with their text, so every delta's ids and text belong together (a
stream follower that skips n tokens skips exactly their text). When a stop
string appears the output ends before it; the tokens that formed it are still
counted as generated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

REPLACEMENT = "\ufffd"  # what a decoder makes of an incomplete UTF-8 sequence


@dataclass(frozen=True, slots=True)
class Delta:
    """What one ``feed`` settled: tokens, their text, and whether a stop string
    ended the output (then nothing more should be fed)."""

    token_ids: tuple[int, ...] = ()
    text: str = ""
    stopped: bool = False


class IncrementalDetokenizer:
    """``decode`` maps ids to text (special tokens skipped); ``stop`` the stop strings."""

    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = tuple(s for s in stop if s)
        self._ids: list[int] = []
        self._prefix_offset = 0  # ids before this never change the text again
        self._read_offset = 0  # ids up to here are in self._text
        self._text = ""  # decoded so far (settled UTF-8)
        self._emitted = 0  # chars of self._text already handed out
        self._pending: list[int] = []  # ids not handed out yet
        self._stopped = False

    @property
    def text(self) -> str:
        """All text handed out so far."""
        return self._text[: self._emitted]

    def feed(self, token_id: int) -> Delta:
        if self._stopped:
            raise RuntimeError("fed after a stop string ended the output")
        self._ids.append(token_id)
        self._pending.append(token_id)
        self._text += self._utf8_delta()
        return self._settle(final=False)

    def flush(self) -> Delta:
        """The output ended (eos, length, abort): hand out whatever is held,
        an incomplete character as the replacement character."""
        if self._stopped:
            return Delta()
        tail = self._decode(self._ids[self._prefix_offset :])
        settled = self._decode(self._ids[self._prefix_offset : self._read_offset])
        self._text += tail[len(settled) :]
        self._read_offset = len(self._ids)
        return self._settle(final=True)

    def _utf8_delta(self) -> str:
        # The usual two-window trick (as in vLLM/TGI): decode a short window before
        # the new ids so leading-space rules stay right, and wait while the tail is
        # an incomplete character.
        settled = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new = self._decode(self._ids[self._prefix_offset :])
        if len(new) > len(settled) and not new.endswith(REPLACEMENT):
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return new[len(settled) :]
        return ""

    def _settle(self, final: bool) -> Delta:
        start = self._emitted
        cut = self._first_stop(start)
        if cut is not None:
            self._stopped = True
            return self._hand_out(cut, stopped=True)
        if not final and (self._read_offset < len(self._ids) or self._held_suffix(start) > 0):
            return Delta()  # an unfinished character, or maybe a stop string's start
        return self._hand_out(len(self._text), stopped=False)

    def _hand_out(self, end: int, stopped: bool) -> Delta:
        text = self._text[self._emitted : end]
        self._emitted = end
        ids, self._pending = tuple(self._pending), []
        return Delta(ids, text, stopped)

    def _first_stop(self, start: int) -> int | None:
        # Held text never holds a stop's start before `start` (see _held_suffix),
        # but a stop may begin inside the held region: search from `start` on.
        found = [i for s in self._stop if (i := self._text.find(s, start)) >= 0]
        return min(found) if found else None

    def _held_suffix(self, start: int) -> int:
        """Length of the longest tail of the unsent text that begins a stop string."""
        tail = self._text[start:]
        best = 0
        for s in self._stop:
            for k in range(min(len(s) - 1, len(tail)), best, -1):
                if tail.endswith(s[:k]):
                    best = k
                    break
        return best
