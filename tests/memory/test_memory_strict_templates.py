"""Summarization with strict chat templates: the summary request is one the template accepts, and failures count.

The summarizer below renders each request with the family's template, as a server does
before it answers, and refuses what the template refuses (the server's 400).
"""

from __future__ import annotations

import pytest
from family_templates import family_tokenizer, real_family_tokenizer

from agent_gym.memory import MemoryConfig, MemorySummary


class TemplateServer:
    """A summarizer that renders every request with a chat template first (a refusal is an error)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.requests: list[list[dict]] = []
        self.refused = 0

    def __call__(self, messages, *, max_tokens):
        self.requests.append(messages)
        try:
            self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:
            self.refused += 1
            raise RuntimeError(f"400 Bad Request: {exc}") from exc
        return f"summary {len(self.requests)}"


def conversation(turns: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": "Task: add numbers. " * 5}]
    for k in range(turns):
        msgs.append({"role": "assistant", "content": f"I will call the tool {k}. " * 6})
        msgs.append({"role": "tool", "content": f"result {k} " * 12})
        msgs.append({"role": "user", "content": f"Go on {k}. " * 4})
    return msgs


@pytest.mark.parametrize("family", ["gemma3", "mistral", "openai"])
def test_strict_templates_get_requests_they_accept(family):
    tokenizer = family_tokenizer(family)
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=400, max_summary_length=40, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0, retry_backoff=0.0)
    msgs = conversation(8)
    memory.add(msgs)
    view = memory.get_prompt_messages()
    assert memory.summaries and memory.failed_summaries == 0 and server.refused == 0
    assert len(view) < len(msgs)  # the prompt shrank
    request = server.requests[0]
    assert [m["role"] for m in request] == ["system", "user"]
    assert request[1]["content"].startswith("Conversation to summarize:\n\n[")


def test_alternating_ranges_keep_the_messages_form():
    tokenizer = family_tokenizer("gemma3")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=20, before_raw_message=1,
                          end_raw_message=-1)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0)
    msgs = [{"role": "system", "content": "s"}]
    for k in range(6):
        msgs += [{"role": "user", "content": f"question {k} " * 20},
                 {"role": "assistant", "content": f"answer {k} " * 20}]
    memory.add(msgs)
    memory.get_prompt_messages()
    assert memory.summaries and server.refused == 0
    assert [m["role"] for m in server.requests[0]][:3] == ["system", "user", "assistant"]


def test_without_a_template_the_retry_sends_the_transcript():
    server = TemplateServer(family_tokenizer("mistral"))
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=30, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, max_retries=1, retry_backoff=0.0)  # counts chars, no template
    memory.add(conversation(14))
    memory.get_prompt_messages()
    assert server.refused == 1 and memory.summaries and memory.failed_summaries == 0
    assert [m["role"] for m in server.requests[1]] == ["system", "user"]


def test_a_summary_that_fails_is_counted(caplog):
    server = TemplateServer(family_tokenizer("mistral"))
    config = MemoryConfig(use_summary=True, max_prompt_length=500, max_summary_length=30, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, max_retries=0, summary_request="messages")
    memory.add(conversation(14))
    memory.get_prompt_messages()
    assert memory.summaries == [] and memory.failed_summaries == 1
    assert "Summary call failed" in caplog.text
    with pytest.raises(ValueError, match="summary_request"):
        MemorySummary(config, chat_client=server, summary_request="xml")


@pytest.mark.parametrize("mode", ["messages", "auto"])
def test_summary_counters_reach_the_step_info(mode):
    """A refused summary request is counted in every later step's ``info["memory"]``, not only logged."""
    import gymnasium as gym

    from agent_gym import TrajectoryWrapper

    tokenizer = family_tokenizer("mistral")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(summary_system_prompt="Summarize.", use_summary=True, max_prompt_length=150,
                          max_summary_length=20, before_raw_message=2, end_raw_message=-1)
    env = TrajectoryWrapper(gym.make("agent_gym/ToolUse-v0"), memory=lambda: MemorySummary(
        config, chat_client=server, tokenizer=tokenizer, max_retries=0, summary_request=mode))
    _, info = env.reset(seed=0)
    assert info["memory"] == {"summaries": 0, "failed_summaries": 0, "summarized": False}
    while True:
        _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        if terminated or truncated:
            break
    steps = info["trajectory"].steps
    counters = [step.info["memory"] for step in steps]
    if mode == "messages":  # Mistral's template refuses the raw range: each refusal is counted
        assert server.refused >= 1 and counters[-1]["failed_summaries"] == server.refused
        assert counters[0]["failed_summaries"] == 1 and counters[-1]["summaries"] == 0
    else:
        assert server.refused == 0 and counters[-1]["failed_summaries"] == 0
        assert counters[-1]["summaries"] >= 1 and any(c["summarized"] for c in counters)
    assert steps[-1].to_dict()["info"]["memory"] == counters[-1]  # exported with the step


@pytest.mark.parametrize("mode", ["messages", "auto"])
def test_real_gemma3_template(mode):
    """Gemma 3's own template (from trl) refuses the raw range; the auto request passes and the prompt shrinks."""
    pytest.importorskip("trl")
    tokenizer = real_family_tokenizer("gemma3")
    server = TemplateServer(tokenizer)
    config = MemoryConfig(use_summary=True, max_prompt_length=400, max_summary_length=40, before_raw_message=2,
                          end_raw_message=-3)
    memory = MemorySummary(config, chat_client=server, tokenizer=tokenizer, max_retries=0, retry_backoff=0.0,
                           summary_request=mode)
    msgs = conversation(8)
    memory.add(msgs)
    view = memory.get_prompt_messages()
    if mode == "messages":
        assert server.refused == 1 and memory.failed_summaries == 1 and not memory.summaries
    else:
        assert server.refused == 0 and memory.summaries and len(view) < len(msgs)


# --------------------------------------------------------------------------------------------
# The prompt view itself: what the policy renders after a summary must pass the same templates.


def chat_turns(turns: int) -> list[list[dict]]:
    """A conversation that strict templates render whole: system, task, then assistant/user turns."""
    first = [{"role": "system", "content": "You solve tasks."}, {"role": "user", "content": "Task: add numbers. " * 5}]
    rounds = [[{"role": "assistant", "content": f"Step {k}: I add the next pair. " * (3 + k % 3)},
               {"role": "user", "content": f"Feedback {k}: go on. " * (2 + k % 4)}] for k in range(turns)]
    return [first, *rounds]


def render(tokenizer, messages) -> str:
    return tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=False, add_generation_prompt=True)


def play_views(tokenizer, summary_cut: str = "auto", **fields) -> tuple[MemorySummary, list[list[dict]]]:
    """Feed ``chat_turns`` to a memory turn by turn; return it and every view it gave."""
    config = MemoryConfig(use_summary=True, summary_system_prompt="Summarize.", **fields)
    memory = MemorySummary(config, chat_client=lambda messages, *, max_tokens: "short summary", tokenizer=tokenizer,
                           max_retries=0, summary_cut=summary_cut)
    views = []
    whole: list[dict] = []
    for batch in chat_turns(12):
        whole += batch
        render(tokenizer, whole)  # the conversation itself is one the template accepts
        memory.add(batch)
        views.append(memory.get_prompt_messages())
    return memory, views


@pytest.mark.parametrize("family", ["gemma3", "mistral", "openai"])
@pytest.mark.parametrize("before", [0, 1, 2])
@pytest.mark.parametrize("end", [0, -1, -2])
def test_summarized_views_render_with_strict_templates(family, before, end):
    """Whatever the raw windows, every view after a summary renders where the whole conversation does."""
    tokenizer = family_tokenizer(family)
    memory, views = play_views(tokenizer, max_prompt_length=160, max_summary_length=20, before_raw_message=before,
                               end_raw_message=end)
    assert len(memory.summaries) >= 2 and memory.failed_summaries == 0
    for view in views:
        render(tokenizer, view)
        assert "short summary" in views[-1][0]["content"]


def test_greedy_cut_breaks_gemma_and_the_aligned_cut_does_not():
    """The cut where the budget ends can leave two user turns in a row; the aligned cut never does."""
    tokenizer = family_tokenizer("gemma3")
    fields = dict(max_prompt_length=160, max_summary_length=20, before_raw_message=2, end_raw_message=-1)
    _, greedy = play_views(tokenizer, "greedy", **fields)
    broken = 0
    for view in greedy:
        try:
            render(tokenizer, view)
        except Exception as exc:  # noqa: BLE001 - the template's refusal
            assert "alternate" in str(exc)
            broken += 1
    assert broken  # the seed's cut (kept as "greedy") is what the issue hit
    memory, aligned = play_views(tokenizer, "aligned", **fields)
    for view in aligned:
        render(tokenizer, view)
        roles = [m["role"] for m in view[1:]]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"] * (len(roles) % 2)
    assert memory.summaries


@pytest.mark.parametrize("before", [0, 1, 2])
def test_real_gemma3_template_renders_every_view(before):
    pytest.importorskip("trl")
    tokenizer = real_family_tokenizer("gemma3")
    memory, views = play_views(tokenizer, max_prompt_length=160, max_summary_length=20, before_raw_message=before,
                               end_raw_message=-1)
    assert memory.summaries
    for view in views:
        render(tokenizer, view)


def test_aligned_view_repeats_the_task_when_no_later_message_has_its_role():
    """A tool-use conversation has one user message: after a cut, the view shows it again before the kept turns."""
    tokenizer = family_tokenizer("qwen3_coder")  # lenient: "aligned" is forced here, "auto" would keep the greedy cut
    config = MemoryConfig(use_summary=True, summary_system_prompt="Summarize.", max_prompt_length=150,
                          max_summary_length=20, before_raw_message=1, end_raw_message=-1)
    memory = MemorySummary(config, chat_client=lambda messages, *, max_tokens: "short summary", tokenizer=tokenizer,
                           summary_cut="aligned")
    memory.add(conversation(0))
    for k in range(8):
        memory.add([{"role": "assistant", "content": f"I will call the tool {k}. " * 4},
                    {"role": "tool", "content": f"result {k} " * 8}])
        view = memory.get_prompt_messages()
        roles = [m["role"] for m in view]
        assert roles[:3] == ["system", "user", "assistant"], roles  # the task, then a turn of the model
        assert view[1]["content"] == conversation(0)[1]["content"]
        fresh = MemorySummary(memory.config.updated({"use_summary": False}), tokenizer=tokenizer,
                              chat_client=lambda messages, *, max_tokens: "", summary_cut="aligned")
        fresh.add(memory.messages)
        assert view == fresh.get_prompt_messages()  # the incremental view is the one a rebuild gives
        assert memory.last_view_tokens == fresh.last_view_tokens
    assert len(memory.summaries) >= 2
    with pytest.raises(ValueError, match="summary_cut"):
        MemorySummary(config, chat_client=lambda messages, *, max_tokens: "", summary_cut="middle")


# --------------------------------------------------------------------------------------------
# End to end: episodes whose policy renders every prompt with Gemma 3's template.


class GemmaRenderingPolicy:
    """Renders each prompt with the family's template as a policy does (a refusal raises), then answers."""

    def __init__(self, tokenizer, turns: int = 9, reply: str = "Step {step}: I add the next pair of numbers. "):
        from agent_gym.policy.chat_tokens import ChatTokenBuilder

        self.builder = ChatTokenBuilder(tokenizer)
        self.turns = turns
        self.reply = reply
        self.calls = 0
        self.rendered: list[list[str]] = []

    def act(self, messages, *, session_id, tools=None):
        self.calls += 1
        plan = self.builder.prepare(f"{session_id}-{self.calls}", messages)  # rendered afresh every turn
        self.rendered.append([m["role"] for m in plan.messages])
        step = len(self.rendered)
        if step > self.turns:
            return "<answer>done</answer>"
        return self.reply.format(step=step) * 3

    def close_session(self, session_id):
        pass


def feedback_env():
    from agent_gym import AgentEnv

    class Feedback(AgentEnv):
        """Each reply without an answer gets the user's feedback (user and assistant turns alternate)."""

        def handle_message(self, parsed, info):
            if parsed.answer is not None:
                super().handle_message(parsed, info)
            else:
                self.add_message("user", "Feedback: that looks right, go on with the next pair. " * 2)

    task = {"id": "sum", "question": "Add the numbers 1 to 20 pair by pair. " * 3, "ground_truth": "done"}
    return Feedback(tasks=[task], max_steps=20, system_prompt="You add numbers.")


@pytest.mark.parametrize("before", [1, 2])
def test_gemma_episode_with_summaries_renders_every_turn(before):
    from agent_gym import TrajectoryWrapper
    from agent_gym.types import EpisodeStatus

    tokenizer = family_tokenizer("gemma3")
    config = MemoryConfig(use_summary=True, summary_system_prompt="Summarize.", max_prompt_length=200,
                          max_summary_length=20, before_raw_message=before, end_raw_message=-1)
    policy = GemmaRenderingPolicy(tokenizer)
    env = TrajectoryWrapper(feedback_env(), memory=lambda: MemorySummary(
        config, chat_client=TemplateServer(tokenizer), tokenizer=tokenizer, max_retries=0))
    obs, info = env.reset(seed=0)
    session = info["episode_id"]
    while True:
        obs, _, terminated, truncated, info = env.step(policy.act(obs, session_id=session))
        if terminated or truncated:
            break
    trajectory = info["trajectory"]
    assert trajectory.status == EpisodeStatus.ENV_DONE
    assert info["memory"]["summaries"] >= 2 and info["memory"]["failed_summaries"] == 0
    assert all(roles[1::2] == ["user"] * len(roles[1::2]) for roles in policy.rendered)


@pytest.mark.parametrize("with_memory", [False, True])
def test_gemma_tool_episode_never_raises(with_memory):
    """Gemma 3's template refuses a tool turn where a user turn is due: an episode goes on or ends with a status.

    Without memory the second prompt (system, task, assistant, tool) is refused; the rollout turns the
    refusal into POLICY_ERROR naming the template error. With a summary the view may render (the tool
    results right after the task), or end the same way; the refusal never escapes the rollout.
    """
    from agent_gym.rollout import collect
    from agent_gym.types import EpisodeStatus

    tokenizer = family_tokenizer("gemma3")
    config = MemoryConfig(use_summary=True, summary_system_prompt="Summarize.", max_prompt_length=150,
                          max_summary_length=20, before_raw_message=2, end_raw_message=-1)
    call = '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{step} * 2"}}}}</tool_call>'
    policy = GemmaRenderingPolicy(tokenizer, reply=call)
    memory = (lambda: MemorySummary(config, chat_client=TemplateServer(tokenizer), tokenizer=tokenizer,
                                    max_retries=0)) if with_memory else None
    (trajectory,) = collect("agent_gym/ToolUse-v0", policy, num_episodes=1, progress=False, memory=memory)
    if trajectory.status == EpisodeStatus.POLICY_ERROR:
        assert "TemplateError: Conversation roles must alternate" in trajectory.steps[-1].info["error"]
    else:
        assert trajectory.status == EpisodeStatus.ENV_DONE and with_memory
    if not with_memory:
        assert trajectory.status == EpisodeStatus.POLICY_ERROR
        assert policy.rendered == [["system", "user"]]  # the second prompt has a tool turn after the model's
