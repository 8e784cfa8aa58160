"""What a worker's tokens cost, in units of one cached input token (DeepSeek's price list: cache
hit 0.028, miss 0.028 x 10, output 0.028 x 15 USD per million). Shared by the policies that
price a worker against what it saves: a turn's (`turns.eligibility`) and a checkpoint's
(`compaction.fold_value`)."""

#: uncached input and output, priced in cached input tokens
MISS = 10.0
OUTPUT = 15.0
#: what one job reads besides its sources, uncached: the task prompt and the catalog
JOB_TOKENS = 400


def expected_requests(completed: int, agentic: bool, prior: int, turns: int = 0, more_turns: int = 0) -> int:
    """The agent requests a session is expected to make yet: the horizon over which a worker's
    saving is counted. As many again as it made so far (`completed` in its `turns` completed
    turns: the Lindy estimate for a lifetime of unknown length). Once it has used a tool, at
    least `more_turns` (`turns.horizonTurns`) turns more of the length its turns have had, and
    `prior` (`turns.horizonRequests`) besides: an agent at work on a task goes on for several
    turns, each as many steps as its turns took so far; a chat that never called a tool may end
    at any answer."""
    if not agentic:
        return completed
    shaped = completed * more_turns // turns if turns else 0
    return max(completed, shaped) + prior
