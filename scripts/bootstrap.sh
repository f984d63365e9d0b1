#!/usr/bin/env bash
# Installs what `make run` / `make test` need on Debian 12 / Ubuntu 22.04+:
# system packages (as root or through sudo) and a .venv with the Python tools.
# Idempotent: does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(g++ make cmake ninja-build pkg-config git libucx-dev ucx-utils libgtest-dev
          nlohmann-json3-dev libsodium-dev libssl-dev libxxhash-dev libtbb-dev python3-dev python3-venv iproute2 clang
          openmpi-bin libopenmpi-dev mpich libmpich-dev gfortran libfftw3-dev)
# libFuzzer's runtime: its own package on Debian 12, part of libclang-common on Ubuntu 22.04.
if apt-cache show libclang-rt-14-dev >/dev/null 2>&1; then PACKAGES+=(libclang-rt-14-dev); fi
# Intel's ipsec-mb (x86_64 only) seals secure frames' AES-256-GCM 4x faster than OpenSSL 3.0 where the
# CPU has VAES; without it the build seals with OpenSSL (CMakeLists.txt, OUTBOARD_IPSEC_MB).
if [[ $(dpkg --print-architecture) == amd64 ]] && apt-cache show libipsec-mb-dev >/dev/null 2>&1; then
  PACKAGES+=(libipsec-mb-dev)
fi
# Build: nanobind, scikit-build-core. Run: numpy, matplotlib (benchmark charts),
# safetensors. Tests only: pytest, build (the sdist test), unicodedata2 (its
# version pins the Unicode version of the committed tokenizer tables, which a
# test regenerates), the reference tokenizers the exactness gate compares
# against (protobuf for sentencepiece's token spans), and faker for
# multi-script test text.
PY_DEPS=("nanobind>=2.0" "scikit-build-core>=0.10" "unicodedata2==16.0.0" "numpy>=1.22" "matplotlib>=3.5" "safetensors>=0.4"
         "pytest>=7" "pytest-timeout>=2" "build>=1" "tiktoken==0.14.0" "tokenizers==0.23.3" "mistral-common==1.13.1"
         "sentencepiece==0.2.3" "protobuf==7.36.2"
         "faker>=30")
MIN_CMAKE=3.25
# The aarch64 agent (make agent-aarch64, make test-aarch64): a cross compiler, qemu-user and the arm64
# builds of the libraries the agent links, from Debian's archive (multiarch). Ubuntu serves arm64 from
# ports.ubuntu.com, which this does not configure: there the aarch64 tests skip, saying so. The tests
# run under qemu with the multiarch libraries (-L /), so libstdc++6:arm64 too: nothing above pulls it in.
CROSS_PACKAGES=(g++-aarch64-linux-gnu qemu-user-static libucx-dev:arm64 libsodium-dev:arm64 libssl-dev:arm64
                libxxhash-dev:arm64 libgtest-dev:arm64 libstdc++6:arm64)
if [[ $(dpkg --print-architecture) == amd64 ]] && grep -qx 'ID=debian' /etc/os-release; then
  PACKAGES+=("${CROSS_PACKAGES[@]}")
fi

if [[ $(id -u) -eq 0 ]]; then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else SUDO=(false); fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ ${SUDO[0]:-} == false ]]; then
    echo "bootstrap: missing packages ${missing[*]}; install them as root (no sudo here)" >&2; exit 1
  fi
  echo "bootstrap: installing ${missing[*]}"
  if [[ " ${missing[*]}" == *:arm64* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    "${SUDO[@]}" dpkg --add-architecture arm64
  fi
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# qemu-user-static's binfmt entry lets an emulated aarch64 agent start its session processes (aarch64
# children); without systemd nothing registers it. Where it cannot be registered, those tests skip.
binfmt=/proc/sys/fs/binfmt_misc
if [[ -f /usr/lib/binfmt.d/qemu-aarch64.conf && ! -e $binfmt/qemu-aarch64 && ${SUDO[0]:-} != false ]]; then
  [[ -e $binfmt/register ]] || "${SUDO[@]}" mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || true
  if ! grep -v '^#' /usr/lib/binfmt.d/qemu-aarch64.conf | "${SUDO[@]}" tee "$binfmt/register" >/dev/null 2>&1; then
    echo "bootstrap: could not register qemu-aarch64 with binfmt_misc: the aarch64 agent tests will skip" >&2
  fi
fi

PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "bootstrap: creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.outboard-deps
want="${PY_DEPS[*]}"
if [[ ! -f $stamp || "$(cat "$stamp")" != "$want" ]]; then
  echo "bootstrap: installing Python dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "${PY_DEPS[@]}"
  echo "$want" > "$stamp"
fi

# Unicode 8.0 character categories for BERT (what HF tokenizers uses), read
# from this source distribution's database header when the test regenerates
# the tables (scripts/gen_unicode_tables.py --check).
legacy=.venv/share/outboard/unicodedata2-8.0.0.tar.gz
if [[ ! -f $legacy ]]; then
  mkdir -p "$(dirname "$legacy")"
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: "unicodedata2==8.0.0" -d "$(dirname "$legacy")"
fi

# Ubuntu 22.04 ships CMake 3.22: take a newer one from PyPI into the .venv.
cmake_version=$(cmake --version 2>/dev/null | head -1 | awk '{print $3}')
if [[ -z $cmake_version ]] || ! printf '%s\n%s\n' "$MIN_CMAKE" "$cmake_version" | sort -V -C; then
  if [[ ! -x .venv/bin/cmake ]]; then
    echo "bootstrap: system CMake ${cmake_version:-missing} < $MIN_CMAKE; installing cmake into .venv"
    .venv/bin/python -m pip install -q "cmake>=$MIN_CMAKE"
  fi
fi
