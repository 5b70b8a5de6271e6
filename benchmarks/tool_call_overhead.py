"""Per-call cost of ``FunctionTool.run``: validation + call + formatting, inline or on a worker thread.

Run: ``python benchmarks/tool_call_overhead.py``. Prints the median over 7 runs of the
mean time per call (µs) of an echo tool and of ToolUse's calculator, run inline
(non-blocking) and handed to a worker thread (blocking, with a time limit).
"""

from __future__ import annotations

import statistics
import time

from agent_gym.envs.tool_use.builtin_tools import calculator
from agent_gym.tools import FunctionTool


def echo(text: str) -> str:
    """Return the text.

    Args:
        text: Anything.
    """
    return text


def per_call_us(tool: FunctionTool, arguments: dict, calls: int = 20000, runs: int = 7) -> float:
    for _ in range(1000):
        tool.run(arguments)
    means = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            tool.run(arguments)
        means.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(means)


def main() -> None:
    cases = [
        ("echo, inline (blocking=False)", FunctionTool(echo, blocking=False), {"text": "hi"}),
        ("echo, worker thread (time_limit=10)", FunctionTool(echo, blocking=True), {"text": "hi"}),
        ("calculator, inline (built-in, non-blocking)", FunctionTool(calculator), {"expression": "2 + 2"}),
        ("calculator, worker thread", FunctionTool(calculator, blocking=True), {"expression": "2 + 2"}),
    ]
    for label, tool, arguments in cases:
        calls = 2000 if tool._threaded else 20000
        print(f"{label:46s} {per_call_us(tool, arguments, calls):7.2f} µs/call")


if __name__ == "__main__":
    main()
