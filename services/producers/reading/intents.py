"""What a clause states, decided by its nearest labelled examples under the sentence encoder.

The bank (`bank.txt`, beside this module) holds short examples in English, German, French and
Spanish, each labelled with what it states: a style key and value (`verbosity=terse`), a key
whose value the gazetteers fill (`language`, `identity`, `tooling`, `veto`, `channel`), or
`none`. A clause takes the label of its `k` nearest examples by summed cosine, when the best
example is at least `min_similarity` close and the winning label leads the runner-up by
`margin`; otherwise it states nothing. The thresholds are tuned on the corpus's tuning part
(`python -m services.producers.evaluate --tune`) and kept in `thresholds.json`, never on the
held-out part.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from habitus import encoder
from habitus.encoder_cache import encode_cached

if TYPE_CHECKING:  # numpy is imported by the classifier's methods (see habitus.encoder)
    import numpy as np

HERE = Path(__file__).parent
BANK = HERE / "bank.txt"
THRESHOLDS = HERE / "thresholds.json"
NONE = "none"


#: a cosine at which a clause is one of the bank's examples with other values in its slots
NEAR_DUPLICATE = 0.93


@dataclass(frozen=True, slots=True)
class Thresholds:
    k: int = 3
    min_similarity: float = 0.55
    margin: float = 0.05

    @classmethod
    def load(cls, path: Path = THRESHOLDS) -> Thresholds:
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        return cls(int(data["k"]), float(data["min_similarity"]), float(data["margin"]))


@dataclass(frozen=True, slots=True)
class Decision:
    """The label chosen for a clause (NONE when nothing is stated), and how sure."""

    label: str
    similarity: float
    lead: float


#: The encoded banks of this process, by what was encoded: a reader is made per service and per
#: test stack, and encoding the ~700 examples again for each cost more than a CPU second.
_ENCODED: dict[tuple[str, ...], encoder.Matrix] = {}
_ENCODED_LOCK = threading.Lock()


def encoded(texts: Sequence[str]) -> encoder.Matrix:
    """The encoder's rows for `texts`, encoded once per process for the same texts in the same
    order (the arrays are read-only, so sharing them is safe), and once per machine while the
    texts and the encoder's release stay the same (habitus.encoder_cache)."""
    key = tuple(texts)
    with _ENCODED_LOCK:
        matrix = _ENCODED.get(key)
        if matrix is None:
            matrix = encode_cached(key)  # and between processes, on disk
            matrix.flags.writeable = False
            _ENCODED[key] = matrix
        return matrix


def load_bank(path: Path = BANK) -> list[tuple[str, str]]:
    """(label, text) pairs of the bank, in file order."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        label, _, text = line.partition(" | ")
        out.append((label.strip(), text.strip()))
    return out


class IntentClassifier:
    """Nearest-example classification of clauses; the bank is encoded on first use, once per
    process for the same bank (see `encoded`)."""

    def __init__(self, bank: Sequence[tuple[str, str]] | None = None,
                 thresholds: Thresholds | None = None,
                 prepare: Callable[[str], str] | None = None):
        """`prepare`: applied to every bank text before it is encoded, as the reader applies
        it to clauses (values replaced by stand-ins), so both sides are compared alike."""
        import numpy as np

        self._bank = list(bank) if bank is not None else load_bank()
        self._prepare = prepare or (lambda text: text)
        self.thresholds = thresholds or Thresholds.load()
        self._labels = np.array([label for label, _ in self._bank])
        self._names = sorted(set(self._labels.tolist()))
        self._index = {name: i for i, name in enumerate(self._names)}
        self._label_ids = np.array([self._index[label] for label in self._labels])
        self._matrix: encoder.Matrix | None = None
        self._lock = threading.Lock()

    def _bank_matrix(self) -> encoder.Matrix:
        if self._matrix is None:
            with self._lock:
                if self._matrix is None:
                    self._matrix = encoded([self._prepare(text) for _, text in self._bank])
        return self._matrix

    def similarities(self, clauses: Sequence[str]) -> np.ndarray:
        """Cosines of each clause with every bank example: (clauses, examples)."""
        import numpy as np

        if not clauses:
            return np.zeros((0, len(self._bank)), dtype=np.float32)
        result: np.ndarray = encoder.encode(clauses) @ self._bank_matrix().T
        return result

    def decide(self, sims: np.ndarray, thresholds: Thresholds | None = None) -> list[Decision]:
        """One decision per row of `similarities(...)`."""
        import numpy as np

        t = thresholds or self.thresholds
        out = []
        k = min(t.k, sims.shape[1]) if sims.size else 0
        for row in sims:
            top = np.argpartition(-row, k - 1)[:k]
            nearest = int(top[np.argmax(row[top])])
            best_sim = float(row[nearest])
            if best_sim >= NEAR_DUPLICATE:
                # The clause is a labelled example but for its values: that example decides.
                # ("I moved to Berlin last month" was outvoted by two looser `none` examples.)
                out.append(Decision(str(self._labels[nearest]), best_sim, 1.0))
                continue
            votes = np.zeros(len(self._names), dtype=np.float64)
            np.add.at(votes, self._label_ids[top], row[top])
            order = np.argsort(-votes)
            best, second = votes[order[0]], (votes[order[1]] if len(order) > 1 else 0.0)
            label = self._names[int(order[0])]
            lead = float(best - second) / max(float(best), 1e-9)
            if best_sim < t.min_similarity or lead < t.margin:
                label = NONE
            out.append(Decision(label, best_sim, lead))
        return out

    def classify(self, clauses: Sequence[str]) -> list[Decision]:
        return self.decide(self.similarities(clauses))
