"""Cost of ``get_prompt_messages`` per turn on episodes of 10, 100 and 1,000 messages.

Each measured turn adds one new message to an episode that already holds N - 1
messages (whose view was built on the previous turn) and times one
``get_prompt_messages()`` call; no summary is triggered (the budget is the 128K
maximum). Because token counts are cached per message and the view is extended
in place, the per-call time should stay flat as N grows: it depends on the new
messages, not on the episode length. For contrast the script also times a
repeated call in the same turn, and the first (cold) call on a whole N-message
episode, which has to count every message once.

Two ways of counting are measured: without a tokenizer (``chars / 4``: the
memory's own bookkeeping only) and with the real Qwen tokenizer
(``agent_gym.models.load_qwen_tokenizer``), where the time is dominated by
encoding the one new message. To keep the set-up fast, the episodes' earlier
messages are pre-encoded through a shared memo; the measured new message is
always one never encoded before, and the cold column uses no memo at all.
Prints medians in microseconds; writes nothing.

Usage:
    python benchmarks/memory_overhead.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable

from agent_gym.memory import MemoryConfig, MemorySimple, MemorySummary
from agent_gym.models import load_qwen_tokenizer

SIZES = (10, 100, 1000)


def message(i: int) -> dict[str, str]:
    """The i-th message of a tool-use episode (distinct contents, realistic lengths)."""
    if i == 0:
        return {"role": "system", "content": "You are a helpful agent. Call tools with <tool_call> JSON."}
    if i % 2 == 1:
        return {
            "role": "assistant",
            "content": f"<think>Step {i}: I should look up item {i} before answering.</think>"
            f'<tool_call>{{"name": "search", "arguments": {{"query": "item {i}"}}}}</tool_call>',
        }
    return {"role": "tool", "content": f"Result {i}: " + " ".join(f"fact-{i}-{k}" for k in range(12))}


def new_message(tag: str) -> dict[str, str]:
    """The measured turn's tool result: the same length at every size, a content never counted before."""
    return {"role": "tool", "content": f"Result {tag}: " + " ".join(f"fact-{k:02d}" for k in range(12))}


class MemoTokenizer:
    """Wraps a tokenizer and remembers ``encode`` results (used only to speed up set-up)."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001
        self.tokenizer = tokenizer
        self.memo: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        ids = self.memo.get(text)
        if ids is None:
            ids = self.memo[text] = self.tokenizer.encode(text, add_special_tokens=False)
        return ids


def never_called(messages, *, max_tokens):  # noqa: ANN001, ANN201 - summarizer signature
    raise AssertionError("no summary should be triggered in this benchmark")


def factories(tokenizer) -> dict[str, Callable[[], MemorySimple]]:  # noqa: ANN001
    big = {"max_prompt_length": 128 * 1024, "max_summary_length": 1024}
    return {
        "MemorySimple": lambda: MemorySimple(MemoryConfig(**big), tokenizer=tokenizer),
        "MemorySummary+thinking": lambda: MemorySummary(
            MemoryConfig(use_summary=True, simplify_thinking=True, before_raw_message=1, end_raw_message=-2, **big),
            chat_client=never_called,
            tokenizer=tokenizer,
        ),
    }


def per_turn(
    make: Callable[[], MemorySimple],
    n: int,
    repeats: int,
    history: list[dict],
    tokenizer=None,  # noqa: ANN001
) -> tuple[float, float, float]:
    """Median µs of the call after adding the n-th message, of a repeated call in the same turn,
    and of encoding one new message of the same shape alone (0 without a tokenizer)."""
    new_turn, same_turn, encode = [], [], []
    for r in range(repeats):
        memory = make()
        memory.add(history[: n - 1])
        memory.get_prompt_messages()
        tag = f"{type(memory).__name__}-{n:04d}-{r:04d}"
        memory.add(new_message(tag))
        gc.disable()
        if tokenizer is not None:
            t = time.perf_counter()
            tokenizer.encode(new_message(tag + "-alone")["content"], add_special_tokens=False)
            encode.append((time.perf_counter() - t) * 1e6)
        t0 = time.perf_counter()
        view = memory.get_prompt_messages()
        t1 = time.perf_counter()
        memory.get_prompt_messages()
        t2 = time.perf_counter()
        gc.enable()
        assert len(view) >= n and not getattr(memory, "summaries", [])
        del view, memory  # freed here, not inside the next timed call
        new_turn.append((t1 - t0) * 1e6)
        same_turn.append((t2 - t1) * 1e6)
    return statistics.median(new_turn), statistics.median(same_turn), statistics.median(encode or [0.0])


def cold(make: Callable[[], MemorySimple], n: int, repeats: int, history: list[dict]) -> float:
    """Median µs of the first call on a whole n-message episode (every message counted once)."""
    times = []
    for _ in range(max(3, repeats // 20)):
        memory = make()
        memory.add(history[:n])
        gc.disable()
        t0 = time.perf_counter()
        memory.get_prompt_messages()
        times.append((time.perf_counter() - t0) * 1e6)
        gc.enable()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200, help="measured turns per size (default 200)")
    args = parser.parse_args()
    qwen = load_qwen_tokenizer()
    history = [message(i) for i in range(max(SIZES))]
    print(f"get_prompt_messages, median µs per call ({args.repeats} turns per size, no summary triggered)")
    print(
        f"{'memory':<24}{'counting':<10}{'messages':>9}{'new turn (+1 msg)':>19}{'encode alone':>17}"
        f"{'same turn':>11}{'cold, whole episode':>21}"
    )
    for counting, warm_tok, cold_tok in (("chars/4", None, None), ("qwen", MemoTokenizer(qwen), qwen)):
        warm, cold_makers = factories(warm_tok), factories(cold_tok)
        for name in warm:
            for n in SIZES:
                new_turn, same_turn, encode = per_turn(warm[name], n, args.repeats, history, cold_tok)
                first = cold(cold_makers[name], n, args.repeats, history)
                print(f"{name:<24}{counting:<10}{n:>9}{new_turn:>19.1f}{encode:>17.1f}{same_turn:>11.1f}{first:>21.1f}")


if __name__ == "__main__":
    main()
