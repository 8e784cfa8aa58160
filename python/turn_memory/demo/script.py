"""The demo's conversation: what the user asks, and what the scripted model answers.

Its shape is an ordinary working chat: one tool-heavy turn (the agent writes a one-page
reference file and prints it back, ~1,500 tokens of tool call and output), then the quick
follow-ups most of a chat is made of (a few hundred tokens each), `/compact`, a question
about the first version that only the raw log can answer, and a closing remark. The big turn
is what per-turn compression is for; the small ones stay as they are (`turns.minTurnTokens`),
so `/compact` has raw history to fold. The scripted model also plays turn-memory's workers
(`devtools.scripted_workers`): a turn worker keeps the request and the last answer.
"""

from __future__ import annotations

from turn_memory.devtools.fake_model import FakeModel
from turn_memory.devtools.scripted_workers import worker_responder

NOTES = """\
zstd frame format: notes for the log-storage design

Frames. A zstd stream is a sequence of independent frames. Each frame starts with the
magic number 0xFD2FB528, then a frame header, one or more blocks, and an optional 32-bit
content checksum (the low bits of XXH64 of the decompressed data). A decoder that reaches
the end of a frame can start on the next one with no state carried over, so frames can be
appended to a file one at a time and read back in one pass.

Frame header. It holds the window descriptor (how much history a block may reference), an
optional dictionary id, and an optional content size. A writer that streams data does not
know the size up front and may leave it out; readers must then decode until the last block.

Blocks. Each block is raw (stored), RLE (one byte repeated) or compressed, and at most 128 KB
of decompressed data. The last block of a frame carries a flag; there is no index of blocks.

Skippable frames. Magic numbers 0x184D2A50 to 0x184D2A5F mark frames a decoder must skip.
They can carry metadata such as an index of the frames that follow.

Levels. Levels 1 to 19 trade speed for ratio (22 with --ultra); decompression speed barely
depends on the level. Level 3 is the default. Negative levels are faster still.

Dictionaries. A dictionary trained on samples of small, similar records (zstd --train) lets
each small frame start with useful history; without one, records of a few hundred bytes
barely compress.

Long-distance matching. --long widens the window (up to 2 GB) to find repeats far apart,
at the cost of memory on both ends.

Checksums. The content checksum detects a damaged frame; a reader can report the frame's
byte offset and continue with the next frame.
"""

#: the turn that asks for something only the raw log still holds
READS_HISTORY = "Remind me: what did the first version of notes.md say about frames? Quote it."
TASKS = [
    "Write notes.md: a one-page reference on the zstd frame format for our log-storage design doc, "
    "then show me the file.",
    "Which of these facts matters most for append-only log files, and why?",
    "Count the words in notes.md.",
    "Would a dictionary help for our log records of about 200 bytes each?",
    "Add a title line '# zstd notes' at the top of notes.md and show the first two lines.",
    "/compact",
    READS_HISTORY,
    "Thanks, that is all for today.",
]

#: the turns' numbers as the session counts them (`/compact` is a command, not a turn)
TURN_OF_TASK = {task: n for n, task in enumerate((t for t in TASKS if not t.startswith("/")), start=1)}


def scripted_model() -> FakeModel:
    fake = FakeModel(responder=worker_responder)  # it also plays turn-memory's workers
    fake.push(
        "turn",
        {"text": "I'll write the reference and print it back.", "tool_calls": [{"name": "bash", "arguments": {
            "command": f"cat > notes.md <<'EOF'\n{NOTES}EOF\ncat notes.md", "description": "write and show notes.md"}}]},
        "notes.md is written: frames, the frame header, blocks, skippable frames, levels, dictionaries, "
        "long-distance matching and checksums, about one page.",
        "Independent frames matter most. An append-only log can write each batch as its own frame and never touch "
        "what is already on disk; a reader decodes frame after frame in one pass, and since no state crosses a "
        "frame boundary, a torn write at the end only costs the last frame. The content checksum complements it: "
        "damage is found and reported per frame, at its byte offset, and reading continues with the next one. "
        "The other facts (levels, long-distance matching) tune the ratio; this one decides whether appending is "
        "safe at all.",
        {"text": "Counting.", "tool_calls": [{"name": "bash", "arguments": {
            "command": "wc -w notes.md", "description": "count words"}}]},
        "notes.md has the word count shown above: about one page, as asked. Most of it is the frame and block "
        "description; the sections on levels and long-distance matching are two sentences each.",
        "Yes. Records of about 200 bytes barely compress on their own: each frame starts with no history, so the "
        "format's own overhead eats most of the gain. A dictionary trained on a few thousand sample records "
        "(zstd --train) gives every frame that history up front; on records this small it typically improves the "
        "ratio two to five times. The cost is operational: the dictionary id is in each frame header, so a reader "
        "needs the same dictionary, and it must be kept and versioned next to the logs.",
        {"text": "Adding the title.", "tool_calls": [{"name": "bash", "arguments": {
            "command": "sed -i '1s/.*/# zstd notes/' notes.md && head -2 notes.md", "description": "title"}}]},
        "The first line is now '# zstd notes', followed by a blank line; the old first line (the document's "
        "subtitle) was replaced, the rest of the file is unchanged.",
        {"text": "Turn 1 was compressed and then folded into the checkpoint; reading its original back.",
         "tool_calls": [{"name": "read_session_history", "arguments": {"turn": 1}}]},
        "The first version said: a zstd stream is a sequence of independent frames, each with the magic number "
        "0xFD2FB528, a header, blocks and an optional checksum, so frames can be appended one at a time and read "
        "back in one pass.",
        "You're welcome.",
    )
    return fake
