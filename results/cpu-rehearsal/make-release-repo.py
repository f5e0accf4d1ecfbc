"""A fixture repo of the reference server whose two commits model SGLang 0.5.16 (main~1) and
0.5.17 (main), as tools/gpu/gpu-run.sh setup makes one of SGLang's released sources.

    python results/cpu-rehearsal/make-release-repo.py /tmp/refserver-release
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.fixture_repo import FixtureRepo  # noqa: E402

repo = FixtureRepo.create(Path(sys.argv[1]))
repo.set_release("0.5.16")
base = repo.commit("reference server modelling SGLang 0.5.16")
repo.set_release("0.5.17")
candidate = repo.commit("reference server modelling SGLang 0.5.17")
print(f"{repo.path}: main~1 {base[:12]} (0.5.16), main {candidate[:12]} (0.5.17)")
