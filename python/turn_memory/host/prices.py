"""What a worker's tokens cost, in units of one cached input token (DeepSeek's price list: cache
hit 0.028, miss 0.028 x 10, output 0.028 x 15 USD per million). Shared by the policies that
price a worker against what it saves: a turn's (`turns.eligibility`) and a checkpoint's
(`compaction.fold_value`)."""

#: uncached input and output, priced in cached input tokens
MISS = 10.0
OUTPUT = 15.0
#: what one job reads besides its sources, uncached: the task prompt and the catalog
JOB_TOKENS = 400


def expected_requests(completed: int, agentic: bool, prior: int) -> int:
    """The agent requests a session is expected to make yet: the horizon over which a worker's
    saving is counted. As many again as it made so far (`completed`: the Lindy estimate for a
    lifetime of unknown length), plus `prior` (`turns.horizonRequests`) once it has used a tool:
    an agent at work on a task goes on for tens of steps, a chat that never called a tool may
    end at any answer."""
    return completed + (prior if agentic else 0)
