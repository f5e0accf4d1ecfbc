#!/usr/bin/env bash
# The GPU run tool: ship the kit to the H200, set up the revisions, run, collect.
# (Replaces the one-off call scripts the older records' COMMAND.txt name; their text is in git.)
#
#   here:        bash tools/gpu/gpu-run.sh prepare        # .gpu-kit/: bundles, kit, extra; prints the calls
#   device run:  bash tools/gpu/gpu-run.sh ship N         # every bundle but the last: to /tmp/gpu-kit
#                bash tools/gpu/gpu-run.sh install N      # the last bundle, install, smoke, one server's memory
#                bash tools/gpu/gpu-run.sh setup          # the revisions and checkpoints (carry extra)
#                bash tools/gpu/gpu-run.sh main [SESSION ARGS]  # setup (once per machine), then
#                                                            # SESSION (default: session) in the background;
#                                                            # packs $OUT/h200-main.tgz when it ends or at HOLD s
#                e.g. main pool NAME [matrix run flags]     # validate(h200x1) alone, from the kit's caches
#                e.g. main upstream                          # issue 35: selftest of 0.5.16 beside fa4 vs Triton
#                e.g. main upstream2                         # issue 35's last items: chunked-prefill selftest, vacuity, retraction logprobs
#                e.g. main upstream3                         # issues 31 + 35: localize beside the chunked stall and the dropped logprob
#                e.g. main upstream4                         # issue 35: the chunked rows with the alignment at the chunk size
#                e.g. main upstream5                         # fa4 under chunked prefill: bit-exact or not
#                bash tools/gpu/gpu-run.sh localize       # issue 31: planted-bug run, then localize
#                bash tools/gpu/gpu-run.sh finish         # waits for SESSION, then the follow-ups
#                                                            # (FOLLOWUPS), packs $OUT/h200-finish.tgz
# kit2 (torch 2.13, SGLang 0.5.20 and 0.5.21; ../shared/gpu-kit/kit2, bundles from its build-kit2.sh):
#   here:        KIT2_BUNDLES=DIR bash tools/gpu/gpu-run.sh prepare2  # .gpu2/: bundles, kit; prints the calls
#   device run:  bash tools/gpu/gpu-run.sh ship2 N        # bundle N (carried) to /tmp/kit2parts
#                bash tools/gpu/gpu-run.sh install2 N     # the last bundle, install, the kit2 repo, models
#                bash tools/gpu/gpu-run.sh main2 [ARGS]   # SESSION2 (default: seed2) in the background;
#                                                            # packs $OUT/h200-kit2.tgz when it ends or at HOLD s
#   here, CPU:   DRY_RUN=1 bash tools/gpu/gpu-run.sh dry  # setup + every session command against
#                                                            # local release sources and the reference
#                                                            # server: typos fail here, not on the GPU
#
# Revisions of $REPO (setup): tag 0.5.16 = the released source (main~1), tag 0.5.17 (main), branch
# 0.5.17+backports = 0.5.17 + patches/0.5.17-backport-*.patch (one commit each: the two
# multi-layer EAGLE fixes, never a release), branch dflash-fix = 0.5.16 + dflash-swa-eviction.patch
# (the DFLASH fix pair). Every run's command line, environment and exit status land in
# $DEST/<name>/COMMAND.txt and $DEST/summary.txt (record).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT=$(cd "$HERE/../.." && pwd)
cd "$PROJECT"
REPO=${REPO:-/tmp/sglang-release}
DEST=${DEST:-/tmp/h200}
SITE=${SITE:-/tmp/site}          # the installed kit (its sglang = 0.5.16)
PY=${PY:-python3}
SPG=${SPG:-48}                   # servers at once on the card (matrix run --servers-per-gpu)
export DETCHECK_CACHE_DIR=${DETCHECK_CACHE_DIR:-/tmp/detcheck-cache-h200}
export PATH=$PATH:/usr/local/cuda/bin HF_HUB_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1 PYTHONUNBUFFERED=1
MODELS=${MODELS-tiny-llama tiny-llama-4l tiny-qwen3next tiny-llama-eagle tiny-llama-4l-eagle3 tiny-llama-4l-dflash tiny-llama-4l-dspark tiny-inkling tiny-gptoss tiny-gptoss-dflash tiny-gptoss-dspark tiny-inkling-dspark}

# record NAME LIMIT CMD...: one command into $DEST/NAME with its command line kept beside it.
# SIGTERM at the limit: detcheck stops its servers and keeps every finished cell.
record() {
  local name=$1 limit=$2; shift 2
  mkdir -p "$DEST/$name"
  { printf "%q " "$@"; echo
    echo "# env: PYTHONPATH=${PYTHONPATH:-} DETCHECK_CACHE_DIR=$DETCHECK_CACHE_DIR timeout $limit"; } >> "$DEST/$name/COMMAND.txt"
  local start=$SECONDS
  timeout "$limit" "$@" > "$DEST/$name/stdout.md" 2> "$DEST/$name/stderr.txt"
  echo "$name: exit $? in $(( SECONDS - start )) s" | tee -a "$DEST/summary.txt"
}

# pack NAME: every record and log under $DEST into $OUT/NAME.tgz (one file back per call).
pack() {
  tar czf "$OUT/$1.tgz" --exclude='*.safetensors' -C "$(dirname "$DEST")" "$(basename "$DEST")" 2>/dev/null
  cat "$DEST/summary.txt" 2>/dev/null; tail -3 "$DEST/monitor.txt" 2>/dev/null
  for f in "$DEST"/*/stderr.txt; do [ -s "$f" ] && { echo "== $f"; tail -n 3 "$f" | cut -c1-300; }; done
}

prepare() {  # here: needs the kit's wheels (make-kit.sh) and PyPI for the extras
  local kit=${KIT_SRC:-$PROJECT/../shared/gpu-kit} out=${KIT_OUT:-/tmp/gpu-kit-out} extra=${EXTRA:-/tmp/extra-whl}
  [ -d "$kit" ] || kit=/work/shared/gpu-kit
  git check-ignore -q .gpu-kit || echo .gpu-kit/ >> "$(git rev-parse --git-common-dir)/info/exclude"
  [ -d "$out/bundle-01" ] || bash "$kit/make-kit.sh" "$out" || return 1
  [ -f "$out/sglang-0.5.17-py.tar.xz" ] || bash "$kit/release-source.sh" 0.5.17 "$out" || return 1
  # fa4 (issue 35): 0.5.16 vendors FlashAttention 4 (sglang.jit_kernel.flash_attn.cute) but not
  # the CuTe DSL under it: nvidia-cutlass-dsl 4.6.0 with its CUDA 13 libraries (88 MB) and
  # quack-kernels, as 0.5.16's wheel pins them. A bundle-* folder, so the kit's packing and
  # install.sh take them like every other wheel; `cutlass` itself is found through the folder
  # the package's .pth names (FA4_PATH), which `pip --target` does not process.
  ls "$out"/bundle-fa4/nvidia_cutlass_dsl_libs_cu13-*.whl > /dev/null 2>&1 || PIP_CONSTRAINT= $PY -m pip download -q \
    --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
    -d "$out/bundle-fa4" nvidia-cutlass-dsl==4.6.0 nvidia-cutlass-dsl-libs-base==4.6.0 \
    nvidia-cutlass-dsl-libs-core==4.6.0 nvidia-cutlass-dsl-libs-cu13==4.6.0 quack-kernels==0.6.1 || return 1
  ls "$extra"/sgl_deep_gemm-*.whl "$extra"/nox-*.whl > /dev/null 2>&1 || PIP_CONSTRAINT= $PY -m pip download -q --no-deps -d "$extra" \
    sgl-deep-gemm==0.1.4.post1 nox==2026.10.20 argcomplete colorlog dependency-groups virtualenv distlib \
    platformdirs python-discovery || return 1
  rm -rf .gpu-kit && mkdir -p .gpu-kit/kit .gpu-kit/extra
  # Bundles: the kit's wheels, first fit, largest first, each as large as a call can carry beside
  # the working tree (64 MiB in all; 63 kept, and 46 at most): three bundles while the tree is
  # under ~17 MiB, four above.
  local tree cap
  tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  cap=$(( (63 << 20) - tree - (1 << 19) )); cap=$(( cap >> 20 )); [ "$cap" -gt 46 ] && cap=46
  $PY - .gpu-kit "${CAP:-$cap}" "$out"/bundle-* <<'PY' || return 1
import os, shutil, sys
dest, cap, paths = sys.argv[1], int(sys.argv[2]) << 20, sys.argv[3:]
wheels = {}
for p in paths:
    for f in ([os.path.join(p, x) for x in os.listdir(p)] if os.path.isdir(p) else [p]):
        if f.endswith(".whl"):
            wheels.setdefault(os.path.basename(f), f)
# A wheel larger than a call carries travels in parts (NAME.whl.partKofN), joined on the device
# once every part is there (ship); install.sh reads only whole *.whl files.
pieces = []  # (name in the bundle, source, offset, size)
for name, path in wheels.items():
    size = os.path.getsize(path)
    n = -(-size // cap)
    step = -(-size // n)
    pieces += [(name if n == 1 else f"{name}.part{k + 1}of{n}", path, k * step, min(step, size - k * step))
               for k in range(n)]
bins = []
for piece in sorted(pieces, key=lambda p: -p[3]):
    b = next((b for b in bins if b[0] + piece[3] <= cap), None)
    if b is None:
        bins.append(b := [0, []])
    b[0] += piece[3]
    b[1].append(piece)
for i, (size, members) in enumerate(bins, 1):
    d = os.path.join(dest, f"bundle-{i:02d}")
    os.makedirs(d)
    for name, path, offset, length in members:
        with open(path, "rb") as src, open(os.path.join(d, name), "wb") as out:
            src.seek(offset)
            out.write(src.read(length))
        shutil.copystat(path, os.path.join(d, name))
    with open(os.path.join(d, "MANIFEST"), "w") as m:
        m.write(f"bundle {i} of {len(bins)}\n" + "\n".join(sorted(n for n, *_ in members)) + "\n")
    print(f"bundle-{i:02d}: {len(members):3d} wheels or parts, {size / 2**20:5.1f} MiB")
PY
  cp "$kit"/install.sh "$kit"/smoke.sh .gpu-kit/kit/ && cp -r "$kit"/models .gpu-kit/kit/
  cp "$out/sglang-0.5.17-py.tar.xz" .gpu-kit/extra/
  # The main call's extras: sgl-deep-gemm (EAGLE graph captures), nox and its dependencies.
  for w in sgl_deep_gemm nox argcomplete colorlog dependency_groups virtualenv distlib platformdirs python_discovery; do
    cp "$extra"/${w}-*.whl .gpu-kit/extra/; done
  # The calls, as PLAN-session.md lists them, with this tree's bundle count.
  local n last
  n=$(ls -d .gpu-kit/bundle-* | wc -l); last=$(printf "%02d" "$n")
  echo "working tree: $(( tree >> 20 )) MiB; the calls (carry | command):"
  for i in $(seq 1 $(( n - 1 ))); do
    echo "  [\".gpu-kit/bundle-0$i\"] | bash tools/gpu/gpu-run.sh ship $i"; done
  echo "  [\".gpu-kit/bundle-$last\", \".gpu-kit/kit\"] | bash tools/gpu/gpu-run.sh install $n"
  echo "  [\".gpu-kit/extra\"] | bash tools/gpu/gpu-run.sh setup"
  echo "  [] | SPG=40 HOLD=585 bash tools/gpu/gpu-run.sh main pool NAME [matrix run flags]   (or main: session)"
  echo "  [] | WAIT=300 bash tools/gpu/gpu-run.sh finish   (after main session: the follow-ups)"
  for c in $(ls -d .gpu-kit/bundle-* | xargs -n1 basename) kit extra; do
    local sum=$(( tree + $(du -sb ".gpu-kit/$c" | cut -f1) ))
    [ "$c" = "bundle-$last" ] && sum=$(( sum + $(du -sb .gpu-kit/kit | cut -f1) ))
    [ $(( sum >> 20 )) -lt 64 ] || { echo "carry .gpu-kit/$c: $(( sum >> 20 )) MiB with the tree, over 64"; return 1; }
  done
}

ship() {  # device: bundle N (carried) to /tmp/gpu-kit; a split wheel joined once all its parts are here
  mkdir -p /tmp/gpu-kit && cp -r ".gpu-kit/bundle-0$1" /tmp/gpu-kit/ && ls /tmp/gpu-kit || return 1
  [ "$1" != 1 ] || { nvidia-smi -L; nproc; free -g | head -2; }
  local first base name n k part parts
  for first in /tmp/gpu-kit/bundle-*/*.whl.part1of*; do
    [ -e "$first" ] || continue
    base=${first%.part1of*}; n=${first##*of}; name=$(basename "$base"); parts=()
    for k in $(seq 1 "$n"); do
      part=$(ls /tmp/gpu-kit/bundle-*/"$name.part${k}of$n" 2>/dev/null) || continue 2
      parts+=("$part")
    done
    cat "${parts[@]}" > "$base" && rm -f "${parts[@]}" && echo "joined $name from $n parts"
  done
}

install_kit() {  # device, the last bundle carried with the kit: install, smoke, one server's host memory
  ship "${1:-3}" && mkdir -p "$DEST" || return 1
  bash .gpu-kit/kit/install.sh > "$DEST/install.log" 2>&1 || { tail -20 "$DEST/install.log"; return 1; }
  export PYTHONPATH=$SITE
  # The kit installs without .pyc files (pip --no-compile): compiled once here, not by every
  # server of a pool at once on its first import.
  local t0=$SECONDS
  $PY -m compileall -q -j 0 "$SITE" > /dev/null 2>&1
  echo "compileall $SITE: $(( SECONDS - t0 )) s" | tee -a "$DEST/install.log"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$DEST/gpu.txt"
  # The host memory the smoke server takes at its peak: the sum of every process's PSS, and the
  # host's used memory (free), each above what they read before it started.
  pss() { awk '/^Pss:/{s+=$2} END{print int(s/1024)}' /proc/[0-9]*/smaps_rollup 2>/dev/null; }
  used() { free -m | awk '/Mem:/{print $3}'; }
  local pss0 used0 pss_peak=0 used_peak=0 now
  pss0=$(pss); pss0=${pss0:-0}; used0=$(used)
  [ "${SMOKE:-1}" = 1 ] || { echo "smoke server skipped (SMOKE=0)"; return 0; }
  OUT=$DEST bash .gpu-kit/kit/smoke.sh > "$DEST/smoke.log" 2>&1 &  # Triton, graphs off
  local smoke=$!
  while kill -0 $smoke 2>/dev/null; do
    now=$(pss); [ "${now:-0}" -gt "$pss_peak" ] && pss_peak=$now
    now=$(used); [ "${now:-0}" -gt "$used_peak" ] && used_peak=$now
    sleep 2
  done
  wait $smoke; local rc=$?
  tail -5 "$DEST/smoke.log"
  echo "one server: $(( pss_peak - pss0 )) MiB PSS, $(( used_peak - used0 )) MiB host used, at its peak;" \
    "$(free -g | awk '/Mem:/{print $2}') GiB total now" | tee "$DEST/server-memory.txt"
  return $rc
}

setup() {  # device (or DRY_RUN here): the revisions and the seeded checkpoints
  [ "${DRY_RUN:-0}" = 1 ] || { export PYTHONPATH=$SITE
    $PY -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .gpu-kit/extra/*.whl \
      || return 1; }
  local G=(git -C "$REPO" -c user.name=detcheck -c user.email=detcheck@localhost)
  rm -rf "$REPO" && mkdir -p "$REPO/python" && cp -r "$SITE/sglang" "$REPO/python/" || return 1
  find "$REPO" -name __pycache__ -prune -exec rm -rf {} +
  git -C "$REPO" init -q -b main && "${G[@]}" add -A && "${G[@]}" commit -qm "sglang 0.5.16 (released package source)" \
    && "${G[@]}" tag 0.5.16 || return 1
  rm -rf "$REPO/python/sglang" && tar -xJf .gpu-kit/extra/sglang-0.5.17-py.tar.xz -C "$REPO/python" || return 1
  "${G[@]}" add -A && "${G[@]}" commit -qm "sglang 0.5.17 (released package source)" && "${G[@]}" tag 0.5.17 || return 1
  "${G[@]}" checkout -q -b 0.5.17+backports 0.5.17 || return 1
  for p in "$HERE"/patches/0.5.17-backport-*.patch; do
    "${G[@]}" apply "$p" && "${G[@]}" commit -qam "backport on 0.5.17: $(basename "$p" .patch)" || return 1
  done
  "${G[@]}" checkout -q -b dflash-fix 0.5.16 && "${G[@]}" apply "$HERE/patches/dflash-swa-eviction.patch" \
    && "${G[@]}" commit -qam "dflash: evict out-of-window SWA KV on the decode path (on 0.5.16)" || return 1
  "${G[@]}" checkout -q main && git -C "$REPO" log --oneline --all
  # Worktrees once, before runs that share the cache start side by side.
  $PY - "$REPO" 0.5.16 0.5.17 0.5.17+backports dflash-fix <<'PY' || return 1
import sys
from harness.revisions import Revision
for ref in sys.argv[2:]:
    print(ref, Revision.resolve(sys.argv[1], ref).checkout())
PY
  for m in $MODELS; do
    if [ "${DRY_RUN:-0}" = 1 ]; then mkdir -p .models && ln -sfn "../fixtures/models/$m" ".models/$m"
    else $PY -m harness.cli make-model "fixtures/models/$m" --out ".models/$m" --seed 0 --force || return 1; fi
  done
}

# --- kit2: SGLang 0.5.20 / 0.5.21 on torch 2.13 -------------------------------------------------
# The kit's own scripts (recv.sh, install-kit2.sh, patches/apply.py) do the shipping and the
# install; these verbs put them into the same record/pack flow and build the revisions from the
# two unpacked releases (the kit's packaging shim applied to both alike).
REPO2=${REPO2:-/tmp/sglang-kit2}
SITE2=/tmp/site2

prepare2() {  # here: the bundles build-kit2.sh wrote (cut for this tree: MAX_MIB=24) and the kit
  local kit=${KIT2_SRC:-$PROJECT/../shared/gpu-kit/kit2} bundles=${KIT2_BUNDLES:-/tmp/kit2-build/bundles}
  [ -d "$kit" ] || kit=/work/shared/gpu-kit/kit2
  [ -d "$bundles/bundle-01" ] || { echo "no bundles in $bundles: run $kit/build-kit2.sh (MAX_MIB=24)"; return 1; }
  git check-ignore -q .gpu2 || echo .gpu2/ >> "$(git rev-parse --git-common-dir)/info/exclude"
  rm -rf .gpu2 && mkdir -p .gpu2 && cp -r "$bundles"/bundle-* .gpu2/ && cp -r "$kit" .gpu2/kit || return 1
  local tree n last c sum
  tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  n=$(ls -d .gpu2/bundle-* | wc -l); last=$(printf "%02d" "$n")
  echo "working tree: $(( tree >> 20 )) MiB; the calls (carry | command):"
  for i in $(seq 1 $(( n - 1 ))); do
    printf '  [".gpu2/bundle-%02d"] | bash tools/gpu/gpu-run.sh ship2 %d\n' "$i" "$i"; done
  echo "  [\".gpu2/bundle-$last\", \".gpu2/kit\"] | bash tools/gpu/gpu-run.sh install2 $n"
  echo "  [] | HOLD=570 bash tools/gpu/gpu-run.sh main2"
  for c in $(ls -d .gpu2/bundle-* | xargs -n1 basename); do
    sum=$(( tree + $(du -sb ".gpu2/$c" | cut -f1) ))
    [ "$c" = "bundle-$last" ] && sum=$(( sum + $(du -sb .gpu2/kit | cut -f1) ))
    # 64 MiB is the limit; a call of 63.7 MiB was refused, so keep a MiB clear
    [ $(( sum >> 20 )) -lt 63 ] || { echo "carry .gpu2/$c: $(( sum >> 20 )) MiB with the tree, over 63"; return 1; }
  done
}

ship2() {  # device: one bundle's parts, checked against its MANIFEST, into /tmp/kit2parts (the
  # kit itself travels with the last bundle only, so its recv.sh is not there yet)
  [ "$1" != 1 ] || { nvidia-smi -L; nproc; free -g | head -2; }
  local b; b=.gpu2/bundle-$(printf %02d "$1")
  mkdir -p /tmp/kit2parts && head -n1 "$b/MANIFEST" && (cd "$b" && tail -n +2 MANIFEST | sha256sum -c --quiet -) \
    && cp "$b"/kit2-index.txt $(tail -n +2 "$b/MANIFEST" | awk -v d="$b/" '{print d $2}') /tmp/kit2parts/ && rm -f /tmp/kit2parts/MANIFEST && ls /tmp/kit2parts | wc -l
}

kit2_env() {  # the kit's environment, with the revision's checkout (not the kit's copy) providing sglang
  source /tmp/kit2env.sh && export PYTHONPATH=$SITE2
}

install2() {  # device, the last bundle carried with the kit: install, then the revisions and models
  ship2 "$1" && mkdir -p "$DEST" || return 1
  bash .gpu2/kit/install-kit2.sh > "$DEST/install2.log" 2>&1 || { tail -20 "$DEST/install2.log"; return 1; }
  tail -3 "$DEST/install2.log"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$DEST/gpu.txt"
  setup2 > "$DEST/setup2.log" 2>&1 || { tail -30 "$DEST/setup2.log"; return 1; }
  touch "$DEST/setup2.done"; tail -8 "$DEST/setup2.log"
}

setup2() {  # device (or DRY_RUN here with SG0520/SG0521 trees): tags 0.5.20, 0.5.21 and the backport branch
  local sg20=${SG0520:-/tmp/sg0520} sg21=${SG0521:-/tmp/sg0521}
  local G=(git -C "$REPO2" -c user.name=detcheck -c user.email=detcheck@localhost)
  rm -rf "$REPO2" && mkdir -p "$REPO2/python" && git -C "$REPO2" init -q -b main || return 1
  local r tree
  for r in 0.5.20:"$sg20" 0.5.21:"$sg21"; do  # one commit per release, each tagged
    tree=${r#*:}; r=${r%%:*}
    rm -rf "$REPO2/python/sglang" && cp -r "$tree/sglang" "$REPO2/python/" || return 1
    find "$REPO2" -name __pycache__ -prune -exec rm -rf {} +
    "${G[@]}" add -A && "${G[@]}" commit -qm "sglang $r (released wheel, kit2 packaging shim)" && "${G[@]}" tag "$r" || return 1
  done
  # The score_mod int8-mask backport lets multi-layer EAGLE capture its graphs on the static pool.
  local kit; kit=$(ls -d .gpu2/kit 2>/dev/null || echo "${KIT2_SRC:-$PROJECT/../shared/gpu-kit/kit2}")
  for r in 0.5.20 0.5.21; do
    "${G[@]}" checkout -q -b "$r+score-mod" "$r" && python3 "$kit/patches/apply.py" score-mod-int8-mask "$REPO2/python" \
      && "${G[@]}" commit -qam "backport on $r: score-mod-int8-mask (Inkling's speculative mask as a 1-bit predicate)" || return 1
  done
  "${G[@]}" checkout -q main && git -C "$REPO2" log --oneline --all
  "$PY" - "$REPO2" 0.5.20 0.5.21 0.5.20+score-mod 0.5.21+score-mod <<'PY' || return 1
import sys
from harness.revisions import Revision
for ref in sys.argv[2:]:
    print(ref, Revision.resolve(sys.argv[1], ref).checkout())
PY
  for m in ${MODELS2:-tiny-inkling}; do
    if [ "${DRY_RUN:-0}" = 1 ]; then mkdir -p .models && ln -sfn "../fixtures/models/$m" ".models/$m"
    else $PY -m harness.cli make-model "fixtures/models/$m" --out ".models/$m" --seed 0 --force || return 1; fi
  done
}

# The seed (b) session: Inkling on the static / lazy / unified pools, 0.5.20 -> 0.5.21, graphs off
# and on (suites/h200/seed-unified.toml), beside multi-layer EAGLE on the static pool with the
# score_mod backport on both sides.
seed2() {
  local run=("$PY" -m harness.cli run --target sglang --repo "$REPO2" --no-progress --format md)
  record seed-unified "${LIMIT_SEED:-540}" "${run[@]}" --base 0.5.20 --candidate 0.5.21 \
    --suite "${SUITE2:-suites/h200/seed-unified.toml}" --slots "${SLOTS2:-16}" --out "$DEST/seed-unified/run" &
  local seed=$!
  [ -z "${MTP_CONFIGS:-}" ] || record seed-mtp "${LIMIT_SEED:-540}" "${run[@]}" --base 0.5.20+score-mod \
    --candidate 0.5.21+score-mod --suite "${SUITE2:-suites/h200/seed-unified.toml}" --slots 4 \
    $(printf -- '--config %s ' $MTP_CONFIGS) --out "$DEST/seed-mtp/run" &
  wait
  echo "session done" >> "$DEST/summary.txt"
}

monitor() {  # load, host memory, GPU and the cores each kind of process uses, every 5 s, in the background
  pgrep -f cpu_monitor.py > /dev/null || setsid "$PY" "$HERE/cpu_monitor.py" "$DEST/monitor.txt" 5 \
    > /dev/null 2>&1 < /dev/null &
}

# The main session, side by side: the three GPU suites in one pool (validate(h200x1), 0.5.16 vs
# 0.5.17; its EAGLE3 rows are the new fixture, graphs off and on), multi-layer EAGLE 2 steps
# and graphs on at 0.5.17 vs 0.5.17+backports, and the DFLASH fix pair's revision_kl and SWA
# peak (0.5.16 vs dflash-fix).
session() {
  local validate=(python3 -m nox -s "validate(h200x1)" --)
  local run=(python3 -m harness.cli run)
  [ "${DRY_RUN:-0}" = 1 ] && validate=(python3 -m harness.cli matrix run h200x1)  # nox skips without the GPU
  [ "${DRY_RUN:-0}" = 1 ] && validate=("$PY" "${validate[@]:1}") && run=("$PY" "${run[@]:1}")
  record backports "${LIMIT_BACKPORTS:-540}" "${run[@]}" --target sglang --repo "$REPO" --base 0.5.17 \
    --candidate 0.5.17+backports --suite suites/h200/release-inkling.toml --slots 6 \
    --config multi-layer-eagle-graphs-on --config multi-layer-eagle-2-steps-graphs-off \
    --config multi-layer-eagle-2-steps-graphs-on --out "$DEST/backports/run" --no-progress --format md &
  local backports=$!
  record validate-pool "${LIMIT_VALIDATE:-600}" "${validate[@]}" --repo "$REPO" --base 0.5.16 --candidate 0.5.17 \
    --servers-per-gpu "$SPG" --out "$DEST/validate-pool/runs" --format md
  wait $backports
  echo "session done" >> "$DEST/summary.txt"
}

# Upstream's bar on 0.5.16 (issue 35), side by side: `detcheck selftest` (the control, then each
# fix 0.5.16 registers for SGLANG_DEBUG_REVERT_PR reverted in the candidate; suites/h200/
# selftest.toml, forced retraction among its rows) and fa4 beside Triton, 0.5.16 vs 0.5.17
# (suites/h200/fa4.toml). MODELS="tiny-llama tiny-qwen3next tiny-inkling" is all they read.
FA4_PATH=$SITE/nvidia_cutlass_dsl/dsl_packages
upstream() {
  export PYTHONPATH=$SITE:$FA4_PATH
  local cli=("$PY" -m harness.cli)
  record selftest "${LIMIT_SELFTEST:-1080}" "${cli[@]}" selftest --target sglang --repo "$REPO" --rev 0.5.16 \
    --suite suites/h200/selftest.toml --slots "${SLOTS_SELFTEST:-8}" --out "$DEST/selftest/run" --no-progress &
  local selftest=$!
  # FA4_CONFIGS="A B": only those configurations, into fa4-again/ (a second look at some rows)
  local fa4=fa4; [ -z "${FA4_CONFIGS:-}" ] || fa4=fa4-again
  record $fa4 "${LIMIT_FA4:-900}" "${cli[@]}" run --target sglang --repo "$REPO" --base 0.5.16 --candidate 0.5.17 \
    --suite suites/h200/fa4.toml --slots "${SLOTS_FA4:-12}" --out "$DEST/$fa4/run" --no-progress --format md \
    $(printf -- '--config %s ' ${FA4_CONFIGS:-})
  wait $selftest
  echo "session done" >> "$DEST/summary.txt"
}

# Issue 35's last items on 0.5.16, side by side: the selftest's chunked-prefill row (26329 bites
# only on a non-final prefill chunk; 25015 beside it as the positive control), a graphs-on row
# whose decode graph never replays (suites/h200/vacuity.toml: must read vacuous, not same), and
# which generated token loses its logprob under forced retraction (retract_logprobs.py).
upstream2() {
  export PYTHONPATH=$SITE:$FA4_PATH
  local cli=("$PY" -m harness.cli)
  record selftest-chunked "${LIMIT_SELFTEST:-500}" "${cli[@]}" selftest --target sglang --repo "$REPO" --rev 0.5.16 \
    --suite suites/h200/selftest.toml --config standalone-chunked-prefill --fix 26329 --fix 25015 \
    --slots 6 --out "$DEST/selftest-chunked/run" --no-progress &
  local selftest=$!
  record vacuity "${LIMIT_VACUITY:-450}" "${cli[@]}" run --target sglang --repo "$REPO" --base 0.5.16 --candidate 0.5.16 \
    --suite suites/h200/vacuity.toml --slots 4 --out "$DEST/vacuity/run" --no-progress --format md &
  local vacuity=$!
  record retract-logprobs 400 "$PY" tools/gpu/retract_logprobs.py --suite suites/h200/selftest.toml \
    --config retract-pressure --repo "$REPO" --ref 0.5.16 --out "$DEST/retract-logprobs/run"
  wait $selftest $vacuity
  echo "session done" >> "$DEST/summary.txt"
}

# Issues 31 and 35, side by side on 0.5.16: localize a planted bug (localize_run, below), the
# chunked-prefill stall taken apart (suites/h200/chunked.toml), and the dropped logprob again with
# each answer's num_retractions (retract_logprobs.py, three rounds).
upstream3() {
  export PYTHONPATH=$SITE:$FA4_PATH
  record chunked "${LIMIT_CHUNKED:-420}" "$PY" -m harness.cli run --target sglang --repo "$REPO" --base 0.5.16 \
    --candidate 0.5.16 --suite suites/h200/chunked.toml --slots 4 --out "$DEST/chunked/run" --no-progress --format md &
  local chunked=$!
  record retract-logprobs-again 400 "$PY" tools/gpu/retract_logprobs.py --suite suites/h200/selftest.toml \
    --config retract-pressure --repo "$REPO" --ref 0.5.16 --out "$DEST/retract-logprobs-again/run" &
  local retract=$!
  localize_run
  wait $chunked $retract
  echo "session done" >> "$DEST/summary.txt"
}

# Issue 35's chunked rows again, with the alignment at the chunk size (the stall's cause, SGLang
# issue 36344): chunked prefill alone and under STANDALONE (suites/h200/chunked.toml), beside the
# selftest's chunked row with 26329 (and 25015, the positive control) reverted.
upstream4() {
  export PYTHONPATH=$SITE:$FA4_PATH
  record chunked-aligned "${LIMIT_CHUNKED:-420}" "$PY" -m harness.cli run --target sglang --repo "$REPO" --base 0.5.16 \
    --candidate 0.5.16 --suite suites/h200/chunked.toml --slots 4 --out "$DEST/chunked-aligned/run" --no-progress --format md &
  local chunked=$!
  record selftest-chunked-aligned "${LIMIT_SELFTEST:-500}" "$PY" -m harness.cli selftest --target sglang --repo "$REPO" \
    --rev 0.5.16 --suite suites/h200/selftest.toml --config standalone-chunked-prefill --fix 26329 --fix 25015 \
    --slots 6 --out "$DEST/selftest-chunked-aligned/run" --no-progress
  wait $chunked
  echo "session done" >> "$DEST/summary.txt"
}

# fa4 under chunked prefill (suites/h200/fa4-chunked.toml): deterministic mode aligns chunks only
# for Triton and FlashInfer, so does fa4 stay bit-exact when a prompt is cut at 128 or 200?
upstream5() {
  export PYTHONPATH=$SITE:$FA4_PATH
  record fa4-chunked "${LIMIT_FA4:-480}" "$PY" -m harness.cli run --target sglang --repo "$REPO" --base 0.5.16 \
    --candidate 0.5.16 --suite suites/h200/fa4-chunked.toml --slots 6 --out "$DEST/fa4-chunked/run" --no-progress --format md
  echo "session done" >> "$DEST/summary.txt"
}

# pool NAME [FLAGS]: validate(h200x1), 0.5.16 vs 0.5.17, alone on the machine, into $DEST/NAME,
# with FLAGS added to its `matrix run` (--first-per-model, --order-from …). Each such run starts
# from a copy of the JIT caches as the kit's install left them (~/.triton, ~/.cache: the smoke
# server's tiny Llama kernels), in a HOME of its own, so that runs one after another start alike.
pool() {
  local name=$1; shift
  local home=/tmp/home-$name
  rm -rf "$home" && mkdir -p "$home" && cp -a ~/.triton ~/.cache "$home/" 2>/dev/null
  ls "$home" > "$DEST/caches-$name.txt"; du -sh "$home"/.triton "$home"/.cache >> "$DEST/caches-$name.txt" 2>&1
  local validate=(python3 -m nox -s "validate(h200x1)" --)
  [ "${DRY_RUN:-0}" = 1 ] && validate=("$PY" -m harness.cli matrix run h200x1)
  HOME=$home TRITON_CACHE_DIR=$home/.triton/cache TORCHINDUCTOR_CACHE_DIR=$home/inductor \
    record "$name" "${LIMIT_VALIDATE:-570}" "${validate[@]}" --repo "$REPO" --base 0.5.16 --candidate 0.5.17 \
    --servers-per-gpu "$SPG" --out "$DEST/$name/runs" --format md "$@"
}

# After the session: the unified Qwen3-Next nulls by raw /generate (0.5.17, the pools suite's
# arguments) and the conformance tables (SGLang's helpers vs detcheck on one 0.5.16 server, the
# installed package, per configuration of suites/h200/conformance.toml: seeded Qwen3-Next and
# Inkling, deterministic, static pool, graphs off).
followups() {
  local target=sglang helpers=$SITE suite=suites/h200/release-pools.toml
  if [ "${DRY_RUN:-0}" = 1 ]; then target=refserver helpers=${HELPERS:?HELPERS=DIR holding sglang/test/}; fi
  record unified-raw 300 "$PY" tools/gpu/raw_generate.py --target $target --suite $suite \
    --config unified-graphs-off --repo "$REPO" --ref 0.5.17 --out "$DEST/unified-raw/run" &
  # The DFLASH fix pair served token for token (revision_kl, graphs off and on) beside its SWA
  # peak: here, not beside the pool (one server took 3.8 GiB of host memory at its start).
  record dflash-fix "${LIMIT_DFLASH:-540}" "$PY" -m harness.cli run --target $target --repo "$REPO" --base 0.5.16 \
    --candidate dflash-fix --suite suites/h200/dflash-fix-revision.toml --slots 8 \
    --out "$DEST/dflash-fix/run" --no-progress --format md &
  for c in qwen3next inkling; do
    record conformance-$c 400 "$PY" tools/gpu/conformance.py --target $target --suite suites/h200/conformance.toml \
      --config $c --helpers "$helpers" --out "$DEST/conformance-$c/run" &
  done
  wait
}

# localize (issue 31): 0.5.16 vs branch planted-mlp = 0.5.16 + patches/localize-planted-mlp.patch
# (decoder layer 1's MLP output x 1.01) on tiny Llama (suites/h200/localize.toml): the run
# (revision_kl different, its reproducer verified), then `detcheck localize` with SGLang's dumper
# on both sides. After install + setup (tag 0.5.16 in $REPO, .models/tiny-llama: MODELS=tiny-llama
# is all it reads). DRY_RUN=1: the reference server, on a $REPO that already holds both refs.
localize_run() {
  local G=(git -C "$REPO" -c user.name=detcheck -c user.email=detcheck@localhost) target=sglang
  [ "${DRY_RUN:-0}" = 1 ] && target=refserver
  "${G[@]}" rev-parse -q --verify planted-mlp > /dev/null || { "${G[@]}" checkout -q -b planted-mlp 0.5.16 \
    && "${G[@]}" apply "$HERE/patches/localize-planted-mlp.patch" \
    && "${G[@]}" commit -qam "planted: decoder layer 1's MLP output x 1.01 (on 0.5.16)" && "${G[@]}" checkout -q main; } \
    || return 1
  record localize-run "${LIMIT_LOCALIZE_RUN:-300}" "$PY" -m harness.cli run --target $target --repo "$REPO" \
    --base 0.5.16 --candidate planted-mlp --suite suites/h200/localize.toml --out "$DEST/localize/run" \
    --no-progress --format md
  record localize "${LIMIT_LOCALIZE:-180}" "$PY" -m harness.cli localize --out "$DEST/localize/run" \
    --row deterministic/revision_kl --repo "$REPO"
}

# hold NAME VERB [ARGS]: this script's VERB in the background (detached, so the call's end does
# not end it), the call held until it ends or HOLD s have passed, then everything packed as NAME.
hold() {
  local name=$1; shift
  monitor
  setsid bash "$0" "$@" >> "$DEST/session.log" 2>&1 < /dev/null &
  local running=$!
  while [ "$SECONDS" -lt "${HOLD:-540}" ] && kill -0 $running 2>/dev/null; do sleep 5; done
  pack "$name"
}

case "${1:-}" in
  prepare) prepare ;;
  ship) ship "${2:?bundle number}" ;;
  install) install_kit "${2:-3}" ;;
  setup|main)
    export PYTHONPATH=$SITE; mkdir -p "$DEST"; verb=$1; shift
    if [ ! -f "$DEST/setup.done" ]; then
      setup > "$DEST/setup.log" 2>&1 || { tail -30 "$DEST/setup.log"; exit 1; }
      touch "$DEST/setup.done"; echo "setup done at ${SECONDS}s"
    fi
    [ "$verb" = setup ] && exit 0
    hold h200-main "${@:-session}" ;;
  prepare2) prepare2 ;;
  ship2) ship2 "${2:?bundle number}" ;;
  install2) install2 "${2:?last bundle number}" ;;
  main2)
    kit2_env; mkdir -p "$DEST"; shift
    [ -f "$DEST/setup2.done" ] || { echo "run install2 first"; exit 1; }
    hold h200-kit2 "${@:-seed2}" ;;
  setup2) setup2 ;;
  seed2) kit2_env; seed2 ;;
  session) session ;;
  localize)  # device, after install + setup (or DRY_RUN=1 here): into $DEST/localize, packed as $OUT/h200-localize.tgz
    export PYTHONPATH=$SITE; mkdir -p "$DEST"; localize_run; pack h200-localize ;;
  upstream) upstream ;;
  upstream2) upstream2 ;;
  upstream3) upstream3 ;;
  upstream4) upstream4 ;;
  upstream5) upstream5 ;;
  pool) shift; pool "$@" ;;
  finish)
    export PYTHONPATH=$SITE
    until grep -q "session done" "$DEST/summary.txt" 2>/dev/null || [ "$SECONDS" -ge "${WAIT:-300}" ]; do sleep 5; done
    [ "${FOLLOWUPS:-1}" = 1 ] && followups
    pack h200-finish ;;
  dry)  # here, on the CPU: every step's commands against local sources; servers cannot start
    export DRY_RUN=1 DEST=${DEST_DRY:-/tmp/h200-dry} REPO=${REPO_DRY:-/tmp/sglang-release-dry}
    export DETCHECK_CACHE_DIR=/tmp/detcheck-cache-dry SITE=${SITE_DRY:?SITE_DRY=DIR holding the 0.5.16 sglang/}
    rm -rf "$DEST" && mkdir -p "$DEST" && export OUT=${OUT:-$DEST/out} && mkdir -p "$OUT"
    # matrix run skips an entry whose GPUs this machine lacks: an nvidia-smi that lists one H200.
    mkdir -p "$DEST/bin" && printf '#!/bin/sh\n[ "$1" = --query-gpu=name ] && echo "NVIDIA H200" || echo "NVIDIA H200, dry-run, 143771 MiB"\n' > "$DEST/bin/nvidia-smi" \
      && chmod +x "$DEST/bin/nvidia-smi" && export PATH=$DEST/bin:$PATH
    setup > "$DEST/setup.log" 2>&1 || { tail -30 "$DEST/setup.log"; exit 1; }
    export LIMIT_VALIDATE=${LIMIT_VALIDATE:-300} LIMIT_BACKPORTS=${LIMIT_BACKPORTS:-300} LIMIT_DFLASH=${LIMIT_DFLASH:-300}
    if [ -n "${DRY_SESSION:-}" ]; then $DRY_SESSION; else session; followups; fi  # DRY_SESSION: e.g. "pool NAME FLAGS"
    pack h200-dry ;;
  *) sed -n 2,23p "$0"; exit 2 ;;
esac
