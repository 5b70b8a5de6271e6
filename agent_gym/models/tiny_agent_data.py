"""Tokenizer and supervised conversations for agent_gym's trained tiny agent.

* :func:`training_tasks` generates ToolUse-v0 tasks from generator seeds other than the
  built-in set's (seed 0), dropping any question the built-in set also asks, so the
  480 built-in tasks stay held out for evaluation.
* :func:`oracle_conversations` plays each task's reference solution
  (``env.unwrapped.oracle_action()``, through the one episode loop
  :func:`~agent_gym.rollout.episode.episode_loop`) through a
  :class:`~agent_gym.policy.chat_tokens.ChatTokenBuilder`, exactly as a policy builds its
  prompts at rollout time (tool schemas from ``info["tools"]`` go to the chat template), and
  returns the final token ids with a mask that is 1 on the assistant's ids (its
  end-of-turn id included) and 0 on everything the template and the environment add.
* :func:`train_tokenizer` trains a small byte-level BPE tokenizer with the ``tokenizers``
  library: digits are split one per id, ChatML special tokens and the tool-use tags are
  single ids, and :data:`~agent_gym.models.chat_template.TINY_AGENT_CHAT_TEMPLATE` is its
  chat template.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_gym.models.chat_template import TINY_AGENT_CHAT_TEMPLATE

__all__ = [
    "SPECIAL_TOKENS",
    "TAG_TOKENS",
    "Conversation",
    "copy_drills",
    "oracle_conversations",
    "train_tokenizer",
    "training_tasks",
    "value_spans",
]

#: Special tokens (skipped by ``decode(..., skip_special_tokens=True)``), ids 0, 1, 2.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Tags that are single ids but stay in decoded text, as in Qwen's tokenizers.
TAG_TOKENS = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
    "<answer>", "</answer>", "<think>", "</think>", "<tools>", "</tools>",
)


@dataclass
class Conversation:
    """One supervised conversation.

    Attributes:
        task_id: The task's id.
        family: The task's family.
        input_ids: Token ids of the whole conversation, as the policy saw and sampled them.
        loss_mask: 1 on ids the assistant produced (end-of-turn ids included), else 0.
        value_mask: 1 on assistant ids that carry the task's values (tool-call arguments and
            the answer: what is copied from the question or a tool's result), else 0; empty
            means none are marked.
    """

    task_id: str
    family: str
    input_ids: list[int]
    loss_mask: list[int]
    value_mask: list[int] = field(default_factory=list)


_ARGUMENTS = re.compile(r'"arguments":\s*(\{.*?\})\}\s*</tool_call>', re.S)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)


def value_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the values in an assistant turn.

    The values are each tool call's arguments object and the answer's content.
    """
    spans = [m.span(1) for m in _ARGUMENTS.finditer(text)]
    return spans + [m.span(1) for m in _ANSWER.finditer(text)]


def _value_flags(tokenizer: Any, text: str, ids: list[int]) -> list[int]:
    """1 for each of ``ids`` (``text``'s ids plus an end-of-turn id) inside a value span."""
    spans = value_spans(text)
    flags = [0] * len(ids)
    if not spans:
        return flags
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) != ids[: len(enc["input_ids"])]:
        return flags
    for i, (a, b) in enumerate(enc["offset_mapping"]):
        if any(a < end and b > start for start, end in spans):
            flags[i] = 1
    return flags


def training_tasks(seeds: Sequence[int], per_family: int = 120) -> list[dict[str, Any]]:
    """ToolUse-v0 tasks from generator ``seeds``, none of them asked by the built-in set.

    Args:
        seeds: Generator seeds; 0 (the built-in set's) is rejected.
        per_family: Tasks per family and seed.

    Returns:
        Task dicts with distinct questions, ids prefixed ``s{seed}-``.

    Raises:
        ValueError: If a seed is 0.
    """
    from agent_gym.envs.tool_use.tasks import builtin_tasks, generate_tasks

    if any(int(s) == 0 for s in seeds):
        raise ValueError("seeds: expected generator seeds other than 0 (the held-out built-in tasks), got 0")
    held_out = {t["question"] for t in builtin_tasks()}
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for seed in seeds:
        for task in generate_tasks(per_family, seed=int(seed)):
            if task["question"] in held_out or task["question"] in seen:
                continue
            seen.add(task["question"])
            out.append({**task, "id": f"s{seed}-{task['id']}"})
    return out


def oracle_conversations(
    tasks: Iterable[dict[str, Any]], tokenizer: Any, *, env_id: str = "agent_gym/ToolUse-v0", **env_kwargs: Any
) -> list[Conversation]:
    """Play each task's reference solution and record the token ids a policy would see.

    Args:
        tasks: ToolUse-v0 task dicts with a ``solution``.
        tokenizer: Tokenizer with a chat template.
        env_id: The environment to play them in.
        **env_kwargs: More ``gym.make`` arguments.

    Returns:
        One :class:`Conversation` per task that the oracle solves.

    Raises:
        RuntimeError: If the incremental prompts do not extend each other (a template problem).
    """
    import gymnasium as gym

    import agent_gym  # noqa: F401  (registers the envs)
    from agent_gym.env.core import AgentEnv
    from agent_gym.policy.chat_tokens import ChatTokenBuilder
    from agent_gym.rollout.episode import ActCall, EpisodeCall, ResetCall, StepCall, drive, episode_loop

    builder = ChatTokenBuilder(tokenizer)
    eot = builder.eot_token_id
    env = gym.make(env_id, **env_kwargs)
    agent_env = env.unwrapped
    out: list[Conversation] = []
    try:
        if not isinstance(agent_env, AgentEnv):
            raise TypeError(f"{env_id}: expected an agent_gym env (one with oracle_action), got "
                            f"{type(agent_env).__name__}")
        for n, task in enumerate(tasks):
            session = f"oracle-{n}"
            turns: list[tuple[int, list[int], list[int]]] = []
            prompt: list[int] = []

            def execute(call: EpisodeCall, session: str = session, turns: list = turns, prompt: list = prompt,
                        task: dict[str, Any] = task) -> Any:
                if isinstance(call, ResetCall):
                    return env.reset(seed=call.seed, options=call.options)
                if isinstance(call, StepCall):
                    return env.step(call.action)
                if not isinstance(call, ActCall):
                    return None
                plan = builder.prepare(session, call.obs, call.tools)
                text = agent_env.oracle_action()
                ids = list(tokenizer.encode(text, add_special_tokens=False)) + [eot]
                builder.commit(plan, ids, text)
                previous = prompt + turns[-1][1] if turns else []
                prompt[:] = list(plan.prompt_ids)
                if prompt[: len(previous)] != previous:
                    raise RuntimeError(f"task {task.get('id')}: a turn's prompt does not extend the previous one")
                turns.append((len(prompt), ids, _value_flags(tokenizer, text, ids)))
                return text

            ending = drive(episode_loop(n, {"task": task}), execute)
            if ending.exception is not None:  # the oracle, the env or the template failed: not a data point
                raise ending.exception
            builder.close(session)
            info = ending.info
            if float(info.get("res_reward", 0.0)) < 1.0:
                continue
            input_ids = prompt + turns[-1][1]
            mask = [0] * len(input_ids)
            values = [0] * len(input_ids)
            for start, ids, flags in turns:
                if input_ids[start : start + len(ids)] != ids:
                    raise RuntimeError(f"task {task.get('id')}: sampled ids are not in the final conversation")
                mask[start : start + len(ids)] = [1] * len(ids)
                values[start : start + len(ids)] = flags
            out.append(Conversation(str(task.get("id")), str(task.get("family", "")), input_ids, mask, values))
    finally:
        env.close()
    return out


def _clean(text: str) -> str:
    for tag in (*SPECIAL_TOKENS, *TAG_TOKENS):
        text = text.replace(tag, " ")
    return text


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048, *, seed: int = 0) -> Any:
    """Train the tiny agent's byte-level BPE tokenizer on ``texts``.

    Args:
        texts: Training text (rendered conversations); special tokens and tags in it are
            left out of the merges, since they are single ids anyway.
        vocab_size: Size of the vocabulary, special tokens and tags included.
        seed: Seed of the text order (the merges depend only on counts; kept for clarity).

    Returns:
        A ``PreTrainedTokenizerFast`` with the chat template, ``<|im_end|>`` as EOS and
        ``<|endoftext|>`` as padding.

    Raises:
        ValueError: If ``vocab_size`` is too small to hold the byte alphabet.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 512:
        raise ValueError(f"vocab_size: expected at least 512, got {vocab_size}")
    corpus = [_clean(t) for t in texts]
    random.Random(seed).shuffle(corpus)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(TAG_TOKENS),
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = TINY_AGENT_CHAT_TEMPLATE
    return fast


def bootstrap_texts(tasks: Sequence[dict[str, Any]], limit: int = 2000) -> list[str]:
    """Rendered oracle conversations of up to ``limit`` tasks, for training the tokenizer.

    Uses a throw-away byte-level tokenizer with the same template, so the text is exactly
    what the chat template produces.
    """
    seed_tok = train_tokenizer([_clean(str(t.get("question", ""))) for t in tasks[:200]], vocab_size=600)
    convs = oracle_conversations(tasks[:limit], seed_tok)
    return [seed_tok.decode(c.input_ids, skip_special_tokens=False) for c in convs]


_DRILL_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _drill_value(rng: random.Random, words: Sequence[str]) -> str:
    """One random value of a kind the tasks carry: an integer, a decimal, a date or an item-like name."""
    kind = rng.random()
    if kind < 0.25:
        text = str(rng.randint(1, 10 ** rng.randint(1, 6) - 1))
    elif kind < 0.5:
        whole = str(rng.randint(0, 10 ** rng.randint(1, 6) - 1))
        text = whole + "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 9)))
    elif kind < 0.65:
        text = f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    else:
        first, second = rng.choice(words).capitalize(), rng.choice(words).lower()
        return f"{first} {second} {rng.choice(_DRILL_LETTERS)}-{rng.randint(100, 999)}"
    return "-" + text if rng.random() < 0.1 else text


def copy_drills(tokenizer: Any, count: int, *, words: Sequence[str], seed: int = 0) -> list[Conversation]:
    """Short synthetic conversations whose only job is copying values verbatim.

    Each drill is a user turn of filler words with two to five random values (uniform
    random digits, dates and item-like names, so nothing but the context predicts them),
    sometimes followed by a tool turn holding one more value; the assistant repeats the
    values in order, separated by ``" | "``. Every value id is marked in ``value_mask``.
    Mixed into training, they teach the small model to carry digit strings across the
    context, which the task conversations exercise only a few times each.

    Args:
        tokenizer: Tokenizer with the tiny agent's chat template.
        count: Number of drills.
        words: Filler vocabulary (for example the words of the training questions).
        seed: Seed of the generator.

    Returns:
        ``count`` conversations with family ``"drill"``.
    """
    rng = random.Random(seed)
    eot = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    out: list[Conversation] = []
    for n in range(count):
        values = [_drill_value(rng, words) for _ in range(rng.randint(2, 5))]
        parts: list[str] = []
        for value in values:
            parts += rng.choices(words, k=rng.randint(1, 6)) + [value]
        parts += rng.choices(words, k=rng.randint(0, 4))
        messages: list[dict[str, str]] = [{"role": "user", "content": " ".join(parts)}]
        if rng.random() < 0.4:
            extra = _drill_value(rng, words)
            values.append(extra)
            messages.append({"role": "tool", "content": extra})
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = list(tokenizer.encode(rendered, add_special_tokens=False))
        text = " | ".join(values)
        ids = list(tokenizer.encode(text, add_special_tokens=False)) + [eot]
        out.append(Conversation(f"drill-{n}", "drill", prompt + ids, [0] * len(prompt) + [1] * len(ids),
                                [0] * len(prompt) + [1] * (len(ids) - 1) + [0]))
    return out
