"""Train agent_gym's tiny tool-use agent (the embedded default model) on CPU.

The recipe, all from fixed seeds:

1. ToolUse-v0 tasks from generator seeds 1..N (:func:`~agent_gym.models.tiny_agent_data.training_tasks`;
   the 480 built-in tasks, generator seed 0, are held out for evaluation);
2. a byte-level BPE tokenizer (digits one per id, ChatML and tool-use tags as single ids)
   trained on the rendered oracle conversations;
3. the oracle's conversations rendered through ``ChatTokenBuilder`` exactly as a policy
   renders them at rollout time;
4. synthetic copy drills (:func:`~agent_gym.models.tiny_agent_data.copy_drills`): short
   conversations whose assistant repeats random numbers, dates and item-like names from the
   context. A ``--drill-ratio`` share of the steps trains on a batch of them. They teach the
   small model to carry values across the context (attention that finds where a value
   starts and follows it), which the task conversations alone exercise too rarely: without
   them, or at a learning rate of 3e-3, the model learns the protocol but guesses the values;
5. a small Qwen2-architecture causal LM trained with AdamW on the assistant's ids only;
   ``--value-weight`` can weigh the ids that carry the task's values more.

The system prompt and tool list are the same in every conversation, so each batch runs that
shared prefix once and the rest of every conversation attends to its (expanded) KV cache:
the same loss as the full forward pass for about half of the compute.

The shipped model (``agent_gym/models/tiny_agent``) is this module's defaults, one stage
(``training.json`` records the exact command)::

    python -m agent_gym.models.train_tiny_agent --out tiny_agent --threads 1

The output directory loads with ``AutoModelForCausalLM.from_pretrained`` /
``AutoTokenizer.from_pretrained`` and serves with ``agent-gym serve --model DIR`` and with the
real engine, ``python -m vllm.entrypoints.openai.api_server --model DIR`` (vLLM's CPU build):
its head size (``hidden_size / num_heads``, 192 / 6 = 32) is one vLLM's CPU attention takes,
and the output head is saved untied so that vLLM's in-place weight reloads are exact (see
:func:`untie_word_embeddings`).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_gym.models.tiny_agent_data import (
    Conversation,
    bootstrap_texts,
    copy_drills,
    oracle_conversations,
    train_tokenizer,
    training_tasks,
)

__all__ = ["VLLM_CPU_HEAD_SIZES", "TrainConfig", "build_agent_model", "common_prefix_length", "main",
           "retie_word_embeddings", "train_tiny_agent", "untie_word_embeddings"]

VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Head sizes vLLM's CPU attention serves (0.32; its Qwen2 code takes hidden_size / num_heads as the size)."""


class TrainConfig:
    """Settings of one training run (every field is a command-line option)."""

    def __init__(
        self,
        *,
        task_seeds: Sequence[int] = tuple(range(1, 17)),
        per_family: int = 120,
        vocab_size: int = 2048,
        hidden_size: int = 192,
        num_layers: int = 4,
        num_heads: int = 6,
        num_kv_heads: int = 6,
        intermediate_size: int = 384,
        steps: int = 5000,
        batch_size: int = 8,
        lr: float = 1e-3,
        warmup: int = 30,
        weight_decay: float = 0.01,
        seed: int = 0,
        threads: int | None = None,
        init_from: str | None = None,
        value_weight: float = 1.0,
        schedule: str = "cosine",
        max_seconds: float = 0.0,
        drill_ratio: float = 0.3,
        drills: int = 20000,
    ) -> None:
        self.task_seeds = [int(s) for s in task_seeds]
        self.per_family = per_family
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        head_dim, rest = divmod(hidden_size, num_heads) if num_heads > 0 else (0, 1)
        if rest or head_dim not in VLLM_CPU_HEAD_SIZES:
            raise ValueError(f"hidden_size / num_heads: expected a head size vLLM's CPU attention takes "
                             f"{list(VLLM_CPU_HEAD_SIZES)}, got {hidden_size} / {num_heads}")
        self.intermediate_size = intermediate_size
        self.steps = steps
        self.batch_size = batch_size
        self.lr = lr
        self.warmup = warmup
        self.weight_decay = weight_decay
        self.seed = seed
        self.threads = threads
        self.init_from = init_from
        if value_weight <= 0:
            raise ValueError(f"value_weight: expected a positive number, got {value_weight}")
        if schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule: expected 'cosine' or 'constant', got {schedule!r}")
        self.value_weight = float(value_weight)
        self.schedule = schedule
        self.max_seconds = float(max_seconds)
        if not 0.0 <= drill_ratio < 1.0:
            raise ValueError(f"drill_ratio: expected a number in [0, 1), got {drill_ratio}")
        self.drill_ratio = float(drill_ratio)
        self.drills = int(drills)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready dict."""
        return dict(vars(self))


def build_agent_model(tokenizer: Any, config: TrainConfig) -> Any:
    """A freshly initialised Qwen2-architecture causal LM sized by ``config`` (seeded)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=2048,
        rope_theta=10_000.0,  # type: ignore[call-arg]  # transformers < 5 takes rope_theta only; 5.x maps it
        tie_word_embeddings=True,
        bos_token_id=eos[1],
        eos_token_id=eos,
        pad_token_id=eos[1],
        initializer_range=0.02,
    )
    torch.manual_seed(config.seed)
    model = Qwen2ForCausalLM(model_config).float()
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1], bos_token_id=eos[1])
    return model


def common_prefix_length(conversations: Sequence[Conversation]) -> int:
    """Length of the ids every conversation starts with, none of them supervised."""
    if not conversations:
        return 0
    first = conversations[0].input_ids
    length = min(len(c.input_ids) for c in conversations) - 1
    for c in conversations[1:]:
        ids = c.input_ids
        n = 0
        while n < length and ids[n] == first[n]:
            n += 1
        length = n
    while length > 0 and any(c.loss_mask[length - 1] for c in conversations):
        length -= 1
    return max(length, 0)


def _cache_keyword(model: Any) -> str:
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _batch_loss(
    model: Any, prefix: Any, batch: list[Conversation], start: int, pad_id: int, value_weight: float = 1.0
) -> Any:
    """Weighted mean cross-entropy over the assistant ids of ``batch`` (prefix run once, cache expanded).

    Ids in a conversation's ``value_mask`` (tool-call arguments, answers) weigh ``value_weight``,
    the other assistant ids 1.
    """
    import torch
    import torch.nn.functional as F

    width = max(len(c.input_ids) for c in batch) - start
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.float32)
    for row, conv in enumerate(batch):
        tail = conv.input_ids[start:]
        ids[row, : len(tail)] = torch.tensor(tail)
        weights = [float(m) for m in conv.loss_mask[start:]]
        if value_weight != 1.0 and conv.value_mask:
            weights = [w * (value_weight if v else 1.0) for w, v in zip(weights, conv.value_mask[start:], strict=True)]
        mask[row, : len(tail)] = torch.tensor(weights, dtype=torch.float32)
    kwargs: dict[str, Any] = {}
    if start > 0:
        out = model(input_ids=prefix, use_cache=True)
        cache = getattr(out, "cache", None)
        if cache is None:
            cache = out.past_key_values
        for layer in cache.layers:
            layer.keys = layer.keys.expand(len(batch), -1, -1, -1)
            layer.values = layer.values.expand(len(batch), -1, -1, -1)
        kwargs[_cache_keyword(model)] = cache
    # Padding sits at the end of each row, so causal attention keeps real ids from seeing it.
    logits = model(input_ids=ids, use_cache=start > 0, **kwargs).logits
    losses = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    token_weights = mask[:, 1:].reshape(-1)
    return (losses * token_weights).sum() / token_weights.sum().clamp(min=1.0)


def _length_bucketed_batches(conversations: Sequence[Conversation], size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches: shuffled, then sorted by length within windows of 16 batches (less padding)."""
    order = list(range(len(conversations)))
    rng.shuffle(order)
    batches: list[list[int]] = []
    window = size * 16
    for start in range(0, len(order), window):
        chunk = sorted(order[start : start + window], key=lambda i: len(conversations[i].input_ids))
        batches += [chunk[i : i + size] for i in range(0, len(chunk), size)]
    rng.shuffle(batches)
    return batches


def _lr_at(step: int, config: TrainConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    if config.schedule == "constant":
        return config.lr
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


def train_tiny_agent(out: str | Path, config: TrainConfig | None = None, *, log: Any = None) -> dict[str, Any]:
    """Run the whole recipe and save model, tokenizer and ``training.json`` to ``out``.

    Args:
        out: Output directory (created if needed).
        config: Settings; defaults to :class:`TrainConfig`'s.
        log: A ``print``-like callable for progress lines (default: stderr).

    Returns:
        The training record written to ``training.json`` (settings, data sizes, losses, wall time).
    """
    import torch

    config = config or TrainConfig()
    say = log or (lambda *a: print(*a, file=sys.stderr, flush=True))
    started = time.perf_counter()
    if config.threads:
        torch.set_num_threads(config.threads)
    random.seed(config.seed)
    torch.manual_seed(config.seed)

    tasks = training_tasks(config.task_seeds, config.per_family)
    if config.init_from:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(config.init_from)
    else:
        tokenizer = train_tokenizer(bootstrap_texts(tasks), config.vocab_size, seed=config.seed)
    conversations = oracle_conversations(tasks, tokenizer)
    prefix_len = common_prefix_length(conversations)
    drills: list[Conversation] = []
    if config.drill_ratio > 0:
        words = sorted({w for t in tasks for w in re.findall(r"[A-Za-z]{3,}", str(t.get("question", "")))})
        # No more drills than the run can use (a short run needs few).
        needed = int(config.steps * config.drill_ratio * 2 * config.batch_size * 1.2) + 64
        drills = copy_drills(tokenizer, min(config.drills, needed), words=words, seed=config.seed)
    data_time = time.perf_counter() - started
    supervised = sum(sum(c.loss_mask) for c in conversations)
    say(f"{len(tasks)} tasks, {len(conversations)} conversations, vocab {len(tokenizer)}, "
        f"shared prefix {prefix_len} ids, {supervised} supervised ids, data in {data_time:.1f}s")

    if config.init_from:
        model = retie_word_embeddings(AutoModelForCausalLM.from_pretrained(config.init_from, dtype=torch.float32))
        say(f"continuing from {config.init_from}")
    else:
        model = build_agent_model(tokenizer, config)
    params = sum(p.numel() for p in model.parameters())
    say(f"model: {params / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr, betas=(0.9, 0.98), eps=1e-8,
    )
    prefix = torch.tensor([conversations[0].input_ids[:prefix_len]], dtype=torch.long)
    pad_id = int(tokenizer.pad_token_id)
    order_rng = random.Random(config.seed)
    batches: list[list[int]] = []
    drill_batches: list[list[int]] = []
    losses: list[float] = []
    drill_losses: list[float] = []
    model.train()
    train_start = time.perf_counter()
    cpu_start = time.process_time()
    steps_done = 0
    for step in range(config.steps):
        if config.max_seconds and time.perf_counter() - train_start > config.max_seconds:
            say(f"stopping at step {step}: --max-seconds {config.max_seconds:g} reached")
            break
        steps_done = step + 1
        if not batches:
            batches = _length_bucketed_batches(conversations, config.batch_size, order_rng)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        if drills and order_rng.random() < config.drill_ratio:
            if not drill_batches:
                drill_batches = _length_bucketed_batches(drills, 2 * config.batch_size, order_rng)
            batch = [drills[i] for i in drill_batches.pop()]
            loss = _batch_loss(model, prefix, batch, 0, pad_id)
            is_drill = True
        else:
            is_drill = False
            batch = [conversations[i] for i in batches.pop()]
            loss = _batch_loss(model, prefix, batch, prefix_len, pad_id, config.value_weight)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        (drill_losses if is_drill else losses).append(loss.item())
        if (step % 25 == 0 or step == config.steps - 1) and losses:
            recent = losses[-25:]
            elapsed = time.perf_counter() - train_start
            drill = f"  drill loss {sum(drill_losses[-25:]) / len(drill_losses[-25:]):.4f}" if drill_losses else ""
            say(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}{drill}  lr {_lr_at(step, config):.2e}  "
                f"{elapsed:.0f}s")
    model.eval()
    train_time = time.perf_counter() - train_start
    cpu_time = time.process_time() - cpu_start
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    untie_word_embeddings(model).save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    _portable_tokenizer_class(out_dir / "tokenizer_config.json")
    record = {
        "command": "python -m agent_gym.models.train_tiny_agent " + " ".join(_as_args(config)),
        "config": config.as_dict(),
        "tasks": len(tasks),
        "conversations": len(conversations),
        "supervised_ids": supervised,
        "shared_prefix_ids": prefix_len,
        "vocab_size": len(tokenizer),
        "parameters": params,
        "steps_done": steps_done,
        "final_loss": sum(losses[-50:]) / max(1, len(losses[-50:])),
        "loss_every_25_steps": [round(sum(losses[i:i + 25]) / len(losses[i:i + 25]), 4)
                                for i in range(0, len(losses), 25)],
        "drill_batches": len(drill_losses),
        "drill_loss_every_25_batches": [round(sum(drill_losses[i:i + 25]) / len(drill_losses[i:i + 25]), 4)
                                        for i in range(0, len(drill_losses), 25)],
        "data_seconds": round(data_time, 1),
        "train_seconds": round(train_time, 1),
        "train_cpu_seconds": round(cpu_time, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
    }
    previous = Path(config.init_from or "") / "training.json"
    if config.init_from and previous.is_file():
        record["previous_stage"] = json.loads(previous.read_text())
    (out_dir / "training.json").write_text(json.dumps(record, indent=2) + "\n")
    say(f"saved to {out_dir} in {record['wall_seconds']}s (final loss {record['final_loss']:.4f})")
    return record


def untie_word_embeddings(model: Any) -> Any:
    """Give ``model`` an output head of its own, equal to its input embeddings (the same function).

    The model trains with tied embeddings and is saved untied: vLLM 0.32 reloads weights in place
    (``/collective_rpc`` ``reload_weights``, what asynchronous training uses) into new tensors, and
    a tied output head then keeps the old embeddings, so the served model mixes old and new
    weights; an untied head is reloaded like every other weight.
    """
    import torch

    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    return model


def retie_word_embeddings(model: Any) -> Any:
    """Undo :func:`untie_word_embeddings` for further training: a head equal to the embeddings is tied again."""
    import torch

    head = getattr(model, "lm_head", None)
    embeddings = model.get_input_embeddings().weight
    if (not getattr(model.config, "tie_word_embeddings", False) and head is not None
            and head.weight.shape == embeddings.shape and torch.equal(head.weight, embeddings)):
        model.config.tie_word_embeddings = True
        model.lm_head.weight = embeddings
    return model


def _portable_tokenizer_class(path: Path) -> None:
    """Name the tokenizer class every transformers release (4.x and 5.x) loads: ``PreTrainedTokenizerFast``."""
    if path.is_file():
        settings = json.loads(path.read_text())
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(settings, indent=2) + "\n")


def _as_args(config: TrainConfig) -> list[str]:
    args = []
    for key, value in config.as_dict().items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, list):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args


def _parser() -> argparse.ArgumentParser:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(
        prog="python -m agent_gym.models.train_tiny_agent",
        description="Train agent_gym's tiny tool-use agent on ToolUse-v0 oracle conversations (CPU).",
    )
    parser.add_argument("--out", required=True, help="output directory for model, tokenizer and training.json")
    for key, value in defaults.as_dict().items():
        flag = "--" + key.replace("_", "-")
        if key == "task_seeds":
            parser.add_argument(flag, default=",".join(map(str, value)),
                                help="comma-separated task generator seeds (not 0, the held-out set)")
        elif key == "threads":
            parser.add_argument(flag, type=int, default=None, help="torch threads (default: torch's choice)")
        elif key == "schedule":
            parser.add_argument(flag, choices=("cosine", "constant"), default=value,
                                help="learning rate after warmup: cosine decay to 5%% or constant (default cosine)")
        elif key == "max_seconds":
            parser.add_argument(flag, type=float, default=value,
                                help="stop training after this many seconds and save (default 0: no limit)")
        elif key == "init_from":
            parser.add_argument(flag, default=None,
                                help="continue training this model directory (its tokenizer and weights)")
        else:
            parser.add_argument(flag, type=type(value), default=value, help=f"default {value}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    args = vars(_parser().parse_args(argv))
    out = args.pop("out")
    args["task_seeds"] = [int(s) for s in str(args["task_seeds"]).split(",") if s.strip()]
    train_tiny_agent(out, TrainConfig(**args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
