"""The one verifier: SFT acceptance, preference ranking, RL reward and evaluation all use it.

``VERSION`` names the verifier's rules (bumped by hand when a rule changes) and its code (a hash
of this package's source), and goes into the lineage of every artifact the verifier touched.
"""

import hashlib
from pathlib import Path

RULES = "2"  # 2: text that is no answer (answers.answer_defect) scores 0


def _code_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]


VERSION = f"{RULES}+{_code_hash()}"
