#!/usr/bin/env bash
# kit-python.sh NAME SITE [ENVFILE] — an interpreter for one kit, for `detcheck run --base-python`
# / `--candidate-python` when a pair's sides need different environments (0.5.17 on the first kit,
# torch 2.11; 0.5.18–0.5.21 on kit2, torch 2.13; 0.5.22+ on kit3, torch 2.14.1).
#
# Writes ${KIT_PYTHON_DIR:-/tmp}/py-NAME and prints its path. It runs ${PY:-python3} with:
#   - ENVFILE sourced first, if given (kit2's /tmp/kit2env.sh: LD_PRELOAD of the NCCL stub,
#     PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK), its PYTHONPATH dropped: the kit's env file names a
#     release's sglang, which would shadow the revision's checkout;
#   - PYTHONPATH = what the caller passes (detcheck puts the revision's checkout there) followed by
#     SITE (a colon list: the kit's --target tree, its hooks), so the checkout's sglang wins and the
#     kit supplies torch, sglang-kernel, flashinfer and the rest.
# The path names the kit, so detcheck keys its cells and its interpreter check by it.
set -euo pipefail
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: kit-python.sh NAME SITE [ENVFILE]" >&2
  exit 2
fi
NAME=$1 SITE=$2 ENVFILE=${3:-}
case $NAME in *[!A-Za-z0-9._-]*|"") echo "kit-python.sh: NAME must be letters, digits, . _ -" >&2; exit 2;; esac
if [ -n "$ENVFILE" ] && [ ! -f "$ENVFILE" ]; then echo "kit-python.sh: no env file $ENVFILE" >&2; exit 2; fi
PY=$(command -v "${PY:-python3}")
OUT=${KIT_PYTHON_DIR:-/tmp}/py-$NAME
{
  echo '#!/usr/bin/env bash'
  echo 'incoming=${PYTHONPATH-}'
  if [ -n "$ENVFILE" ]; then printf '. %q\n' "$ENVFILE"; fi
  printf 'export PYTHONPATH="${incoming:+$incoming:}"%q\n' "$SITE"
  printf 'exec %q "$@"\n' "$PY"
} > "$OUT"
chmod 755 "$OUT"
echo "$OUT"
