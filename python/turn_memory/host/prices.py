"""What a worker's tokens cost, in units of one cached input token (DeepSeek's price list: cache
hit 0.028, miss 0.028 x 10, output 0.028 x 15 USD per million). Shared by the policies that
price a worker against what it saves: a turn's (`turns.eligibility`) and a checkpoint's
(`compaction.fold_value`)."""

#: uncached input and output, priced in cached input tokens
MISS = 10.0
OUTPUT = 15.0
#: what one job reads besides its sources, uncached: the task prompt and the catalog
JOB_TOKENS = 400
