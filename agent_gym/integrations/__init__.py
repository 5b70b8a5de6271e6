"""Adapters between agent_gym rollouts and the trainers researchers use.

One module per trainer, each importing its trainer lazily:

- :mod:`agent_gym.integrations.contract`: the training contract every adapter follows
  (one ``rollout_id`` per episode, advantage groups keyed by task, a selectable reward
  assignment per segment, infrastructure failures masked, never a fake zero).

Nothing here is imported by ``import agent_gym`` or ``gym.make``.
"""

__all__: list[str] = []
