"""The session benchmark's prefix-cache price model (turn_memory.devtools.price_model)."""

from __future__ import annotations

import pytest

from turn_memory.devtools.price_model import (
    BLOCK_TOKENS,
    CHARS_PER_TOKEN,
    DEEPSEEK,
    PrefixCache,
    Request,
    bill,
    canonical_text,
    interval_tokens,
    output_tokens,
    price,
)

UNIT = BLOCK_TOKENS * CHARS_PER_TOKEN  # characters in one cache unit


def text(units: int, tag: str) -> str:
    return "".join(f"{tag}{i:04d}".ljust(UNIT, ".") for i in range(units))


def test_the_first_request_misses_entirely_and_an_identical_one_hits_all_of_it():
    body = text(10, "a") + "tail"  # 10 whole intervals and a partial one
    first, second = price([Request(body, 1), Request(body, 1)])
    assert first.hit_tokens == 0 and first.prompt_tokens == 10 * BLOCK_TOKENS + 1
    # the whole input is a unit of its own (DeepSeek: the end of the user input is persisted)
    assert second.hit_tokens == 10 * BLOCK_TOKENS + 1 and second.miss_tokens == 0


@pytest.mark.parametrize("short", [1, 2, 3, 100, UNIT - 1])
def test_a_request_that_extends_an_earlier_one_reads_all_of_it_whatever_its_length(short):
    # the e2e failure: request 1 ended 1-3 characters short of an interval, its tokens rounded up
    # to a whole 64 (7,552), and request 2 hit only the intervals before it (7,488)
    first_text = text(118, "a")[:-short]
    first, second = price([Request(first_text, 1), Request(first_text + "<|assistant|>next", 1)])
    assert second.hit_tokens == first.prompt_tokens == -(-(118 * UNIT - short) // CHARS_PER_TOKEN)


def test_a_request_that_shares_only_the_start_of_an_earlier_input_hits_its_whole_intervals():
    earlier = text(5, "a") + "tail of the first request"
    _, diverging, shorter = price([Request(earlier, 1), Request(text(5, "a") + "tail of another", 1),
                                   Request(text(4, "a") + "a0004...", 1)])
    assert diverging.hit_tokens == 5 * BLOCK_TOKENS  # not the earlier input's unit: it does not match it in full
    assert shorter.hit_tokens == 4 * BLOCK_TOKENS  # a prefix of an earlier input, ending inside an interval


def test_a_change_misses_from_the_unit_it_falls_in_to_the_end():
    base = text(10, "a")
    changed = base[:4 * UNIT + 7] + "X" + base[4 * UNIT + 8:]  # one character in unit 5
    _, p = price([Request(base, 1), Request(changed, 1)])
    assert p.hit_tokens == 4 * BLOCK_TOKENS
    assert p.miss_tokens == 6 * BLOCK_TOKENS


def test_a_prefix_hits_against_any_earlier_request_not_only_the_last():
    a, b = text(6, "a"), text(6, "b")
    third = a + text(2, "c")
    _, _, p = price([Request(a, 1), Request(b, 1), Request(third, 1)])
    assert p.hit_tokens == 6 * BLOCK_TOKENS


def test_shared_content_after_a_different_start_does_not_hit():
    # a worker whose tools/system differ from the agent's shares nothing, whatever follows
    history = text(8, "h")
    _, p = price([Request("AGENT-SYSTEM".ljust(UNIT, " ") + history, 1),
                  Request("WORKER-SYSTEM".ljust(UNIT, " ") + history, 1)])
    assert p.hit_tokens == 0


def test_cost_uses_hit_miss_and_output_prices():
    body = text(4, "a")
    priced = price([Request(body, 100, "agent"), Request(body + text(1, "z"), 50, "worker")])
    first, second = priced
    assert first.cost_usd == pytest.approx((4 * BLOCK_TOKENS * DEEPSEEK.miss + 100 * DEEPSEEK.output) / 1e6)
    assert second.cost_usd == pytest.approx((4 * BLOCK_TOKENS * DEEPSEEK.hit + BLOCK_TOKENS * DEEPSEEK.miss
                                             + 50 * DEEPSEEK.output) / 1e6)
    total = bill(priced)
    assert total.cost_usd == pytest.approx(first.cost_usd + second.cost_usd)
    assert total.hit_ratio == pytest.approx(4 / 9)
    assert total.share("worker") == pytest.approx(second.cost_usd / total.cost_usd)
    assert total.share("nobody") == 0.0


def test_canonical_text_orders_tools_then_messages_and_sees_every_part():
    tools = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "data:x"}}]},
        {"role": "assistant", "content": "ok", "reasoning_content": "THINK",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "RESULT"},
    ]
    out = canonical_text(tools, messages)
    order = [out.index(s) for s in ("bash\nrun", "SYS", "hi", "[image ", "THINK", "ok", '{"command":"ls"}', "RESULT")]
    assert order == sorted(order)
    # a change anywhere changes the text (so the cache sees it)
    assert canonical_text(tools, messages[:3]) != out
    assert canonical_text([], messages) != out


def test_output_tokens_count_text_reasoning_and_calls():
    assert output_tokens({"text": "x" * 40}) == 10
    assert output_tokens({"text": "x" * 8, "reasoning": "y" * 8,
                          "tool_calls": [{"name": "ab", "arguments": "cd"}]}) == 5
    assert output_tokens(None) == 1 and output_tokens({}) == 1


def test_the_cache_hits_whole_units_from_the_start():
    cache = PrefixCache()
    assert cache.lookup_and_add("x" * (UNIT - 1)) == 0  # nothing cached yet
    assert cache.lookup_and_add("x" * (UNIT - 1)) == BLOCK_TOKENS  # the whole earlier input: 255 chars, 64 tokens
    assert cache.lookup_and_add("x" * (UNIT - 2)) == 0  # shorter than every unit cached
    assert cache.lookup_and_add("y" * UNIT * 2) == 0
    assert cache.lookup_and_add("y" * UNIT * 3) == 2 * BLOCK_TOKENS
    assert cache.lookup_and_add("y" * UNIT * 2 + "z") == 2 * BLOCK_TOKENS


def test_interval_tokens_are_the_whole_units_of_a_text():
    assert interval_tokens("x" * (3 * UNIT - 1)) == 2 * BLOCK_TOKENS
    assert interval_tokens("x" * 3 * UNIT) == 3 * BLOCK_TOKENS
