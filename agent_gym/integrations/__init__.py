"""Adapters between agent_gym rollouts and the trainers researchers use.

One module per trainer, each importing its trainer lazily:

- :mod:`agent_gym.integrations.engine`: the seed's engine API (``BaseEngineWrapper``, ``GymEngineWrapper``):
  batches of tasks in, one training record per trainable segment out.
- :mod:`agent_gym.integrations.contract`: the training contract every adapter follows
  (one ``rollout_id`` per episode, advantage groups keyed by task, a selectable reward
  assignment per segment, infrastructure failures masked, never a fake zero).
- :mod:`agent_gym.integrations.slime`: slime's and vime's custom generate, reward and GRPO post-process
  functions; its samples (and :func:`agent_gym.export.to_slime_samples`') come from
  :mod:`agent_gym.integrations.slime_samples`.
- :mod:`agent_gym.integrations.trl`: TRL's ``GRPOTrainer`` (``rollout_func`` and ``environment_factory``).
- :mod:`agent_gym.integrations.skyrl`: any env as a skyrl-gym ``BaseTextEnv``, and a
  token-exact generator with SkyRL's ``generate(input_batch) -> GeneratorOutput``.
- :mod:`agent_gym.integrations.verl`: a verl agent loop (``AgentLoopBase``) running an env
  through verl's ``server_manager.generate``, token-exact, and the ``agent_gym_grpo`` advantage
  estimator (:mod:`agent_gym.integrations.verl_advantage`) that keeps masked rows out of their group.

Nothing here is imported by ``import agent_gym`` or ``gym.make`` (``agent_gym.GymEngineWrapper`` loads
its module on first use).
"""

__all__: list[str] = []
