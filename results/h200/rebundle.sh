#!/usr/bin/env bash
# Here (not on the GPU box): repack the kit's wheels, plus extra wheels (sgl-deep-gemm for the
# EAGLE graph captures, nox and its dependencies for `nox -s "validate(h200x1)"`), into bundles
# of at most CAP MiB, so that each device call's carry plus this checkout (~10 MiB) stays under
# the 64 MiB a call may carry. Same MANIFEST format as the kit's make-kit.sh ("bundle i of N"),
# so the kit's install.sh installs them.
#   bash results/h200/rebundle.sh OUT WHEEL_DIR...      (CAP=46 by default)
# The extra wheels (sgl-deep-gemm pinned: 0.2.5 cannot load its _C.so under the box's torch 2.11):
#   pip download --no-deps -d /tmp/extra-whl sgl-deep-gemm==0.1.4.post1 nox==2026.10.20 argcomplete \
#     colorlog dependency-groups virtualenv distlib platformdirs python-discovery
set -euo pipefail
OUT=$1; shift
rm -rf "$OUT" && mkdir -p "$OUT"
python3 - "$OUT" "${CAP:-46}" "$@" <<'PY'
import os, shutil, sys
out, cap, dirs = sys.argv[1], int(sys.argv[2]) * 2**20, sys.argv[3:]
wheels = {}  # file name -> path: one copy of each wheel, whichever folder holds it
for d in dirs:
    for f in os.listdir(d):
        if f.endswith(".whl"):
            wheels.setdefault(f, os.path.join(d, f))
bins: list[list] = []
for f in sorted(wheels, key=lambda f: -os.path.getsize(wheels[f])):  # first fit, largest first
    size = os.path.getsize(wheels[f])
    if size > cap:
        sys.exit(f"{f} alone exceeds {cap >> 20} MiB")
    b = next((b for b in bins if b[0] + size <= cap), None)
    if b is None:
        b = [0, []]
        bins.append(b)
    b[0] += size
    b[1].append(f)
for i, (size, files) in enumerate(bins, 1):
    d = os.path.join(out, f"bundle-{i:02d}")
    os.makedirs(d)
    for f in files:
        shutil.copy2(wheels[f], d)
    with open(os.path.join(d, "MANIFEST"), "w") as m:
        m.write(f"bundle {i} of {len(bins)}\n" + "\n".join(sorted(files)) + "\n")
    print(f"bundle-{i:02d}: {len(files):3d} wheels, {size / 2**20:5.1f} MiB")
PY
