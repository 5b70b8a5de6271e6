"""Parse time of each named tool-call parser beside hermes; client CPU per turn, harmony template beside ChatML.

Run: ``python benchmarks/parsers.py --messages 10000 --repeats 5 --episodes 20``.

1. The same 10,000 assistant messages (seeded: reasoning or not, 0-3 tool calls with
   nested arguments, an answer or not, prose around them) are written in each format (the
   parser's own ``format_calls``; ``<think>`` reasoning, harmony's analysis channel) and
   parsed; the median over ``--repeats`` runs of the mean µs per message, and its ratio to
   hermes. The parsers take turns within each repeat.
2. Client CPU per turn (``time.process_time``) of :class:`~agent_gym.policy.ChatTokenBuilder`'s
   ``prepare`` + ``commit`` over ToolUse-like episodes (system prompt, 6 tool schemas, 4 tool
   turns and an answer), with the gpt-oss harmony template of the tests (``openai`` family,
   structured messages) and agent_gym's ChatML template (``hermes``, pass-through), both on the
   Qwen BPE; first turns (a full render) and later turns (incremental) apart. Runs in one
   process, side by side, alternating.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agent_gym.parsers import format_tool_call, make_parser

NAMES = ["hermes", "llama3_json", "mistral", "openai", "deepseek_v3", "qwen3_coder", "pythonic"]
WORDS = "the tool result shows that we need another value before the final answer can be given".split()


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def message_specs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` messages as (reasoning, calls, content) specs."""
    rng = random.Random(seed)
    specs = []
    for _ in range(n):
        calls = [(rng.choice(["calculator", "convert_units", "lookup_item", "date_add"]),
                  {"expression": f"{rng.randint(1, 999)} * {rng.randint(1, 99)}", "unit": rng.choice(["km", "mi"]),
                   "options": {"precision": rng.randint(0, 6), "tags": [_prose(rng, 2) for _ in range(2)]}})
                 for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        answer = f" <answer>{rng.randint(1, 10**6)}</answer>" if not calls or rng.random() < 0.1 else ""
        specs.append({"reasoning": _prose(rng, rng.randint(0, 60)), "calls": calls,
                      "content": _prose(rng, rng.randint(0, 20)) + answer})
    return specs


def render(name: str, spec: dict[str, Any], parser: Any) -> str:
    """One spec written as a model of this format writes it."""
    calls, reasoning, content = spec["calls"], spec["reasoning"], spec["content"]
    if name == "openai":
        parts = [f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"] if reasoning else []
        if calls:
            parts.append(parser.format_calls(calls))
        elif content:
            parts.append(f"<|channel|>final<|message|>{content}")
        return "".join(parts)
    think = f"<think>{reasoning}</think>" if reasoning else ""
    if name == "hermes":
        return think + content + "".join(format_tool_call(n, a) for n, a in calls)
    return think + content + (parser.format_calls(calls) if calls else "")


def parse_times(n: int, repeats: int) -> dict[str, float]:
    """Median µs per message of each parser; the parsers take turns within each repeat (same load)."""
    specs = message_specs(n)
    prepared = {}
    for name in NAMES:
        parser = make_parser(name, "qwen3" if name not in ("hermes", "openai") else None)
        texts = [render(name, s, parser) for s in specs]
        got = sum(len(parser.parse(t).tool_calls) for t in texts)
        assert got == sum(len(s["calls"]) for s in specs), (name, got)
        prepared[name] = (parser, texts)
    runs: dict[str, list[float]] = {name: [] for name in NAMES}
    for _ in range(repeats):
        for name, (parser, texts) in prepared.items():
            start = time.perf_counter()
            for text in texts:
                parser.parse(text)
            runs[name].append((time.perf_counter() - start) / n * 1e6)
    return {name: statistics.median(values) for name, values in runs.items()}


def _tools() -> list[dict[str, Any]]:
    from agent_gym.envs.tool_use import BUILTIN_TOOLS
    from agent_gym.tools import as_tool

    return [as_tool(f).schema for f in BUILTIN_TOOLS]


def _episode_turns(family: str) -> list[str]:
    call = ("calculator", {"expression": "6 * 7"})
    if family == "openai":
        parser = make_parser("openai")
        thinking = "I should compute this with the tool. " * 4
        return ["<|channel|>analysis<|message|>" + thinking + "<|end|><|start|>assistant"
                + parser.format_calls([call])] * 4 + [
            "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|><answer>42</answer>"
            "<|return|>"]
    return ["<think>" + "I should compute this with the tool. " * 4 + "</think>\n" + format_tool_call(*call)
            + "<|im_end|>"] * 4 + ["<think>Done.</think><answer>42</answer><|im_end|>"]


def turn_cpu(tokenizer: Any, family: str, episodes: int) -> tuple[float, float]:
    """(median µs of CPU for a first turn, for a later turn) of prepare + commit."""
    from agent_gym.policy import ChatTokenBuilder

    builder = ChatTokenBuilder(tokenizer, track_retokenization=False)
    tools = _tools()
    turns = _episode_turns(family)
    sampled = [tokenizer.encode(t, add_special_tokens=False) for t in turns]
    texts = [tokenizer.decode(ids[:-1] if ids[-1] in builder.stop_ids else ids, skip_special_tokens=False)
             for ids in sampled]
    first: list[float] = []
    later: list[float] = []
    for episode in range(episodes):
        session = f"ep{episode}"
        msgs = [{"role": "system", "content": "You are a careful assistant. " * 8},
                {"role": "user", "content": f"What is 6 * 7? (episode {episode})"}]
        for k, (ids, text) in enumerate(zip(sampled, texts, strict=True)):
            start = time.process_time()
            plan = builder.prepare(session, msgs, tools)
            builder.commit(plan, ids, text)
            (first if k == 0 else later).append((time.process_time() - start) * 1e6)
            assert plan.new_segment is False
            msgs = [*msgs, {"role": "assistant", "content": text}, {"role": "tool", "content": "42"}]
        builder.close(session)
    return statistics.median(first), statistics.median(later)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    args = ap.parse_args()

    times = parse_times(args.messages, args.repeats)
    print(f"parse time per message, median of {args.repeats} runs over the same {args.messages} messages")
    for name, us in times.items():
        print(f"  {name:12s} {us:8.2f} µs   {us / times['hermes']:5.2f}x hermes")

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from family_templates import family_tokenizer

    from agent_gym.models import load_qwen_tokenizer

    chatml, harmony = load_qwen_tokenizer(), family_tokenizer("openai")
    results: dict[str, list[tuple[float, float]]] = {"hermes (ChatML)": [], "openai (harmony)": []}
    for _ in range(3):  # alternate, so load changes hit both alike
        results["hermes (ChatML)"].append(turn_cpu(chatml, "hermes", args.episodes))
        results["openai (harmony)"].append(turn_cpu(harmony, "openai", args.episodes))
    print(f"client CPU per turn (prepare + commit), median over {args.episodes} episodes x 3 rounds")
    summary = {}
    for label, rounds in results.items():
        summary[label] = (statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds))
        print(f"  {label:18s} first turn {summary[label][0]:8.0f} µs   later turns {summary[label][1]:8.0f} µs")
    base, other = summary["hermes (ChatML)"], summary["openai (harmony)"]
    print(f"  harmony / ChatML: first {other[0] / base[0]:.2f}x, later {other[1] / base[1]:.2f}x")
    print(json.dumps({"parse_us": times, "turn_cpu_us": summary}))


if __name__ == "__main__":
    main()
