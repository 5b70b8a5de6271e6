"""Write notebooks/12_async_grpo.ipynb; with --run, execute it first (outputs saved in the file)."""

# ruff: noqa: E501

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
md = nbformat.v4.new_markdown_cell
code = nbformat.v4.new_code_cell

cells = [
    md("# 12 · Asynchronous GRPO: rollouts keep running while the trainer updates the server\n\n"
       "Notebook 07 trains the tiny agent synchronously: sample a batch, train, push the weights, sample again. "
       "Here the episodes never stop. A `RolloutStream` keeps episodes running against a reference server "
       "(`agent-gym serve` in dev mode, vLLM's RL routes); the trainer takes groups as they finish, takes one "
       "policy-gradient step, saves a checkpoint and has the server reload it (`stream.update_weights(path)`: "
       "pause, reload, version + 1, resume) while the other episodes go on. It is the twin of "
       "`scripts/train_grpo_demo.py --async`.\n\n"
       "Some samples were drawn by older weights than the trainer's: every sampled id records its weight "
       "version and the logprob the server gave it (the *behaviour* logprob). The loss corrects with "
       "**truncated importance sampling (TIS)**: per sampled id the weight `min(exp(logp_trainer - "
       "logp_behaviour), C)` with `C = 2` (no gradient through it) multiplies `advantage * logp_trainer`."),
    code("import os\n"
         "import shutil\n"
         "import sys\n"
         "import tempfile\n"
         "from pathlib import Path\n\n"
         "import torch\n"
         "from transformers import AutoModelForCausalLM\n\n"
         "import agent_gym  # noqa: F401 - registers the env ids\n"
         "from agent_gym.models import default_model_path\n"
         "from agent_gym.models.tiny_agent_data import training_tasks\n"
         "from agent_gym.policy import SamplingParams, VLLMPolicy\n"
         "from agent_gym.rollout.stream import RolloutStream\n\n"
         "sys.path.insert(0, str(Path.cwd().parent / \"scripts\"))  # the script twin's helpers\n"
         "from grpo_async_demo import TIS_CLIP, start_dev_server, task_rounds, tis_policy_gradient_step\n"
         "from grpo_common import episode_reward, grpo_advantages\n\n"
         "FAMILY = \"lookup\"\n"
         "ITERATIONS = 2         # the committed comparison runs 12\n"
         "TASKS_PER_ITERATION = 4\n"
         "GROUP_SIZE = 4\n"
         "REWARD = \"total\"       # answer + tool-call shaping: groups whose samples differ even in two iterations\n"
         "torch.manual_seed(0)\n"
         "torch.set_num_threads(1)  # the server gets the other core"),
    md("## The server, the policy and the trainer\n\n"
       "`start_dev_server` runs `python -m agent_gym.reference_server --model MODEL` with "
       "`VLLM_SERVER_DEV_MODE=1` (the same as `VLLM_SERVER_DEV_MODE=1 agent-gym serve --model MODEL`), which "
       "enables vLLM's RL routes: `POST /pause?mode=`, `/resume`, `/collective_rpc` (`reload_weights`), "
       "`/update_weight_version` and `GET /weight_info`. The policy samples "
       "from the full distribution in token mode (`vllm_generate`): each id comes back with its logprob and "
       "weight version."),
    code("path = str(default_model_path())\n"
         "server_process, server = start_dev_server(path, threads=1)\n"
         "sampling = SamplingParams(temperature=1.0, top_k=-1, top_p=1.0, min_p=0.0, max_tokens=96, seed=0, logprobs=0)\n"
         "policy = VLLMPolicy([server], path, sampling, api=\"vllm_generate\")\n"
         "trainer = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)\n"
         "optimizer = torch.optim.AdamW(trainer.parameters(), lr=1e-3, weight_decay=0.0)\n"
         "pool = [t for t in training_tasks([1000], per_family=40) if t[\"family\"] == FAMILY][:8]\n"
         "checkpoints = Path(tempfile.mkdtemp(prefix=\"async-grpo-\"))\n"
         "print(\"server\", server, \"|\", len(pool), \"tasks of family\", FAMILY)"),
    md("## The loop\n\n"
       "The stream keeps one iteration's worth of episodes in flight. `max_staleness=1`: no group starts that "
       "could only be handed out more than one version late, and a group older than that at hand-out would be "
       "dropped. Each iteration prints the version lag of its samples (current version minus the oldest version "
       "of the sample's ids) and the importance ratios: their mean, max, and the fraction truncated at `C`. "
       "Ids sampled under the trainer's current weights must re-score to a ratio of 1 (the last number; 0 "
       "when no id of the batch has the current version)."),
    code("stream = RolloutStream(\"agent_gym/ToolUse-v0\", policy, task_rounds(pool, TASKS_PER_ITERATION, seed=0),\n"
         "                       samples_per_task=GROUP_SIZE, concurrency=TASKS_PER_ITERATION * GROUP_SIZE,\n"
         "                       max_staleness=1, groups_per_update=TASKS_PER_ITERATION, max_steps=6)\n"
         "rows = []\n"
         "with stream:\n"
         "    for it in range(ITERATIONS):\n"
         "        groups = stream.take(TASKS_PER_ITERATION)  # the first groups to finish\n"
         "        version = stream.version\n"
         "        episodes = [t for g in groups for t in g.trajectories]\n"
         "        usable = [t for t in episodes if len(t.segments) == 1 and float(t.response_masks.sum()) > 0]\n"
         "        advantages = grpo_advantages([episode_reward(t, REWARD) for t in usable], [t.group_id for t in usable])\n"
         "        stats = tis_policy_gradient_step(trainer, optimizer, usable, advantages, version=version, clip=TIS_CLIP)\n"
         "        trainer.save_pretrained(checkpoints / f\"v{version + 1}\")\n"
         "        stream.update_weights(str(checkpoints / f\"v{version + 1}\"), mode=\"abort\")  # episodes go on\n"
         "        lags = [version - t.weight_version_start for t in episodes]\n"
         "        reward = sum(episode_reward(t, REWARD) for t in episodes) / len(episodes)\n"
         "        rows.append({\"iteration\": it, \"mean_reward\": reward, \"lags\": lags, **stats})\n"
         "        nonzero = sum(abs(a) > 1e-6 for a in advantages)\n"
         "        print(f\"iter {it}  version {version}  mean reward {reward:.3f}  nonzero advantages {nonzero}  \"\n"
         "              f\"lag per sample {sorted(lags)}  \"\n"
         "              f\"ratio mean {stats['ratio_mean']:.3f} max {stats['ratio_max']:.2f} \"\n"
         "              f\"truncated {stats['clipped_fraction']:.1%}  |ratio-1| on current-version ids \"\n"
         "              f\"{stats['current_max_ratio_error']:.1e}\")\n"
         "print(\"stream:\", stream.stats.handed, \"groups handed out,\", stream.stats.dropped, \"dropped,\",\n"
         "      stream.stats.updates, \"updates; server version\", stream.version)\n"
         "assert all(r[\"current_max_ratio_error\"] < 1e-3 for r in rows)\n"
         "assert all(0 <= lag <= 1 for r in rows for lag in r[\"lags\"])"),
    md("The server now samples from the last checkpoint: a turn it samples re-scores exactly under the trainer."),
    code("import gymnasium as gym\n\n"
         "env = gym.make(\"agent_gym/ToolUse-v0\")\n"
         "obs, info = env.reset(seed=0, options={\"task\": pool[0]})\n"
         "env.close()\n"
         "out = policy.act(obs, session_id=\"check\", tools=info[\"tools\"])\n"
         "ids = torch.tensor([list(out.prompt_token_ids) + list(out.token_ids)])\n"
         "with torch.no_grad():\n"
         "    logits = trainer(input_ids=ids).logits[0, len(out.prompt_token_ids) - 1:-1]\n"
         "logp = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]\n"
         "error = float((logp - torch.tensor(out.logprobs)).abs().max())\n"
         "print(f\"versions of the turn's ids: {sorted(set(out.weight_versions))}; max |logprob difference| {error:.1e}\")\n"
         "assert error < 1e-3 and set(out.weight_versions) == {ITERATIONS}\n"
         "policy.close()\n"
         "server_process.terminate()\n"
         "server_process.wait(timeout=60)\n"
         "shutil.rmtree(checkpoints)"),
    md("## Synchronous and asynchronous on the same tasks\n\n"
       "The committed comparison (`scripts/results/grpo_async/`, commands in `docs/async_rollouts.md`) runs both "
       "demos for 12 iterations on the same 16 lookup tasks, drawn in the same order (8 tasks x 8 samples per "
       "iteration, learning rate 3e-4, reward 1 for a correct answer):"),
    code("from IPython.display import Image, display\n\n"
         "png = Path.cwd().parent / \"scripts/results/grpo_async/rewards.png\"\n"
         "if png.exists():\n"
         "    display(Image(str(png)))"),
]

nb = nbformat.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
path = ROOT / "notebooks" / "12_async_grpo.ipynb"
if "--run" in sys.argv:
    NotebookClient(nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(path.parent)}}).execute()
nbformat.write(nb, path)
print(path)
