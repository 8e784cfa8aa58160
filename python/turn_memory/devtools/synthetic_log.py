"""A large DSH 0.1.0-rc.8 session log with turn-memory's footprint, written to disk in the
exact on-disk form: one zstd frame per append batch, streamed deltas packed into chunk rows.

For the inspect tests and benchmark, where a real DSH session of 100+ MB would take hours.
Each turn has a user message, a runtime-context snapshot, 1-4 tool steps (reasoning, text
and a tool call streamed as chunk rows, the assistant message, a 1-9 KB tool result) and a
final answer. turn-memory's events follow the engine's shapes: a `pending` marker at every
turn end; in the next turn's pre-step the turn lands in place (compression marker + one
assistant replacement inside landing step 0), or as a no-op marker (every 7th turn), or not
at all (every 11th stays pending); a session checkpoint folds older turns every
`checkpoint_every` turns. Tool output is drawn from random lines, so it compresses about as
much as real build logs do. Deterministic for a given seed.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import zstandard

from turn_memory.host.dialect import SNAPSHOT_PLUGIN
from turn_memory.host.dialects import RC8
from turn_memory.host.markers import marker_source

#: message ids; reseeded per log so that a seed always writes the same bytes
_IDS = random.Random(0)
MODEL_SOURCE = {"kind": "model", "provider": "deepseek-official", "model": "deepseek-chat"}


@dataclass
class SyntheticLog:
    """What was written: the figures a reader must agree with."""

    path: Path
    bytes: int = 0
    frames: int = 0
    events: int = 0
    lines: int = 0
    turns: int = 0
    #: turn -> ["pending", "compression", ...] in log order
    markers: dict[int, list[str]] = field(default_factory=dict)
    noop_turns: set[int] = field(default_factory=set)
    #: (checkpoint seq, first shadowed seq, last shadowed seq, shadowed node count)
    checkpoints: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: byte offset of every frame, in order
    frame_offsets: list[int] = field(default_factory=list)


class _Writer:
    def __init__(self, out: BinaryIO, stats: SyntheticLog, level: int) -> None:
        self.out = out
        self.stats = stats
        self.cctx = zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=False)
        self.lines: list[bytes] = []
        self.seq = 0
        #: current surface, seqs in order (the generator needs it to plan replacements)
        self.surface: list[int] = []
        self.data: dict[int, dict[str, Any]] = {}  # user/message data of live first nodes, by seq

    def row(self, record: dict[str, Any]) -> None:
        self.lines.append(orjson.dumps(record))

    def event(self, kind: str, data: Any, **surface: Any) -> int:
        seq = self.seq
        self.row({"type": kind, "seq": seq, "time": 1_790_000_000_000 + seq, "data": data, **surface})
        self.seq += 1
        return seq

    def chunk_row(self, tag: str, turn: int, step: int, index: int, members: list[str], **call: str) -> None:
        payload = {"args": members} if tag == "tool-call-chunks" else {"texts": members}
        self.row({"type": tag, "seq0": self.seq, "time0": 1_790_000_000_000 + self.seq,
                  "data": {"turn": turn, "step": step, "index": index, **call, "dt": [1] * (len(members) - 1), **payload}})
        self.seq += len(members)

    def flush(self) -> None:
        if not self.lines:
            return
        frame = self.cctx.compress(b"\n".join(self.lines) + b"\n")
        self.stats.frame_offsets.append(self.stats.bytes)
        self.out.write(frame)
        self.stats.bytes += len(frame)
        self.stats.frames += 1
        self.stats.lines += len(self.lines)
        self.lines.clear()


class _Text:
    """Cheap random text: words for prose, random 'log lines' for tool output."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        letters = string.ascii_lowercase
        self.words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(4000)]
        self.log_lines = [
            f"src/{rng.choice(self.words)}/{rng.choice(self.words)}.py:{rng.randint(1, 2000)}: "
            f"{' '.join(rng.choices(self.words, k=rng.randint(3, 9)))} {rng.getrandbits(64):016x}"
            for _ in range(20000)]

    def prose(self, words: int) -> str:
        return " ".join(self.rng.choices(self.words, k=words))

    def pieces(self, count: int) -> list[str]:
        return [" ".join(self.rng.choices(self.words, k=self.rng.randint(1, 4))) + " " for _ in range(count)]

    def output(self) -> str:
        return "\n".join(self.rng.choices(self.log_lines, k=self.rng.randint(15, 110)))


def _user(text: str, **source: Any) -> dict[str, Any]:
    return {"id": f"u{_IDS.getrandbits(48):x}", "role": "user", "content": [{"type": "text", "text": text}],
            "source": source or {"kind": "user"}}


def _assistant(turn: int, step: int, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"turn": turn, "step": step, "message": {"id": f"a{_IDS.getrandbits(48):x}", "role": "assistant",
                                                   "content": content, "source": MODEL_SOURCE}}


def write_synthetic_log(path: str | Path, *, target_bytes: int = 0, seed: int = 0, level: int = 3,
                        checkpoint_every: int = 150, turns: int | None = None,
                        stream_scale: float = 1.0) -> SyntheticLog:
    """Write turns until the file reaches `target_bytes` (or, with `turns`, that many completed
    turns); the last turn is left open. `stream_scale` multiplies the streamed chunks per
    block (about 120 events per turn at 1.0, 200 at 1.8)."""
    path = Path(path)
    stats = SyntheticLog(path)
    rng = random.Random(seed)
    _IDS.seed(seed)
    text = _Text(rng)
    with open(path, "wb") as out:
        w = _Writer(out, stats, level)
        w.row({"type": "session", "version": 0, "id": f"synthetic-{seed}", "createdAt": 1_790_000_000_000,
               "cwd": "/work/synthetic", "delegationDepth": 0})
        w.flush()
        turn = 0
        pending: tuple[int, list[int]] | None = None  # (turn, its surface nodes) awaiting landing
        def more() -> bool:
            return turn < turns if turns is not None else stats.bytes < target_bytes or pending is None

        def n(low: int, high: int) -> int:
            return max(1, round(rng.randint(low, high) * stream_scale))

        while more():
            turn += 1
            w.event("turn/start", {"turn": turn})
            task = _user(f"Task {turn}: " + text.prose(rng.randint(10, 60)))
            first = w.event("user/message", task, surfaceOp="append")
            w.surface.append(first)
            w.data[first] = task
            snap = w.event("user/message", _user("Current runtime context. " + text.prose(30), plugin=SNAPSHOT_PLUGIN,
                                                 kind="plugin", form="snapshot"), surfaceOp="append")
            w.surface.append(snap)
            w.flush()
            if turn > 1 and turn % checkpoint_every == 0:
                _checkpoint(w, stats, turn)
            if pending is not None:
                _land(w, stats, text, rng, *pending, open_turn=turn)
                pending = None
            nodes = [first, snap]
            steps = rng.randint(1, 4)
            for step in range(1, steps + 2):
                w.event("step/start", {"turn": turn, "step": step})
                if step <= steps:
                    call_id = f"call_{turn}_{step}"
                    reasoning, said = text.pieces(n(8, 40)), text.pieces(n(3, 12))
                    args = orjson.dumps({"command": text.prose(6)}).decode()
                    w.chunk_row("reasoning-chunks", turn, step, 0, reasoning)
                    w.chunk_row("text-chunks", turn, step, 1, said)
                    w.chunk_row("tool-call-chunks", turn, step, 2, [args[:9], args[9:]], id=call_id, name="bash")
                    nodes.append(w.event("assistant/message", _assistant(turn, step, [
                        {"type": "reasoning", "text": "".join(reasoning)}, {"type": "text", "text": "".join(said)},
                        {"type": "tool-call", "id": call_id, "name": "bash", "arguments": args}]), surfaceOp="append"))
                    w.event("tool/call", {"turn": turn, "step": step, "call": {"id": call_id, "name": "bash"}})
                    nodes.append(w.event("tool/result", {"turn": turn, "step": step, "message": {
                        "id": f"t{turn}_{step}", "role": "user", "source": {"kind": "tool", "callId": call_id},
                        "content": [{"type": "tool-result", "toolCallId": call_id,
                                                                              "name": "bash", "content": [
                                                                                  {"type": "text", "text": text.output()}]}]}},
                        surfaceOp="append"))
                else:
                    said = text.pieces(n(5, 30))
                    w.chunk_row("text-chunks", turn, step, 0, said)
                    nodes.append(w.event("assistant/message", _assistant(turn, step, [{"type": "text", "text": "".join(said)}]),
                                         surfaceOp="append"))
                w.surface.extend(nodes[-2:] if step <= steps else nodes[-1:])
                w.event("step/end", {"turn": turn, "step": step})
                w.flush()
            w.event("turn/end", {"turn": turn, "reason": {"kind": "completed"}})
            marker = w.event("user/message", {**w.data[first], "source": marker_source(RC8, "pending", turn)},
                             surfaceOp={"op": "replace", "start": first, "end": first}, sourceEventSeqs=[first])
            w.data[marker] = w.data.pop(first)
            w.surface[w.surface.index(first)] = marker
            nodes[0] = marker
            stats.markers.setdefault(turn, []).append("pending")
            stats.turns = turn
            w.flush()
            pending = None if turn % 11 == 0 else (turn, nodes)
        stats.events = w.seq
    return stats


def _land(w: _Writer, stats: SyntheticLog, text: _Text, rng: random.Random, turn: int, nodes: list[int], *,
          open_turn: int) -> None:
    """Land `turn` in the open turn's pre-step, as the engine does on rc8."""
    first = nodes[0]
    if first not in w.surface:  # a checkpoint folded it first
        return
    stats.markers[turn].append("compression")
    if turn % 7 == 0:  # nothing to rewrite: the no-op marker only
        seq = w.event("user/message", {**w.data[first], "source": marker_source(RC8, "compression", turn, workers=1)},
                      surfaceOp={"op": "replace", "start": first, "end": first}, sourceEventSeqs=[first])
        w.surface[w.surface.index(first)] = seq
        stats.noop_turns.add(turn)
        w.flush()
        return
    at = w.surface.index(first)
    seq = w.event("user/message", _user(f"Task {turn} (compressed): " + text.prose(12),
                                        **marker_source(RC8, "compression", turn, workers=1)),
                  surfaceOp={"op": "replace", "start": first, "end": first}, sourceEventSeqs=[first])
    w.surface[at] = seq
    rest = nodes[1:]
    w.event("step/start", {"turn": open_turn, "step": 0})
    folded = w.event("assistant/message", _assistant(open_turn, 0, [{"type": "text", "text": text.prose(rng.randint(20, 80))}]),
                     surfaceOp={"op": "replace", "start": rest[0], "end": rest[-1]}, sourceEventSeqs=list(rest))
    start = w.surface.index(rest[0])
    w.surface[start:start + len(rest)] = [folded]
    w.event("step/end", {"turn": open_turn, "step": 0})
    w.flush()


def _checkpoint(w: _Writer, stats: SyntheticLog, turn: int) -> None:
    """Fold everything but the last three turns' worth of surface into one checkpoint."""
    keep = 3 + 12 * 3  # the open turn's two nodes plus roughly three recent turns
    if len(w.surface) <= keep + 2:
        return
    shadowed = w.surface[:-keep]
    cid = f"cmp-{turn}"
    w.event("compaction/start", {"compactionId": cid, "turn": turn, "trigger": "pressure"})
    w.event("compaction/summary", {"compactionId": cid, "shadowedSeqs": shadowed})
    seq = w.event("user/message", _user("[turn-memory checkpoint] " + " ".join(f"turn summary {i}." for i in range(40)),
                                        kind="plugin", plugin="compact", compactionId=cid),
                  surfaceOp={"op": "replace", "start": shadowed[0], "end": shadowed[-1]}, sourceEventSeqs=shadowed)
    w.event("compaction/end", {"compactionId": cid})
    w.surface[:len(shadowed)] = [seq]
    stats.checkpoints.append((seq, shadowed[0], shadowed[-1], len(shadowed)))
    w.flush()
