"""Pin the labels every run is compared with (swegreen/data/verified_labels.json).

    python scripts/pin_labels.py DATASET NAME SOURCE

DATASET: the rows whose labels become the pinned ones (a hub id or a local file); NAME
names that labelling in every run's provenance; SOURCE says where it came from. Only a
digest of each row's labels is written, never the rows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from swegreen.core.dataset import load_dataset
from swegreen.core.labels import LABELS_FILE, pin_file

OUT = Path(__file__).resolve().parents[1] / "shared" / "swegreen" / "data" / LABELS_FILE


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    dataset, name, source = sys.argv[1:]
    OUT.write_text(pin_file(load_dataset(dataset).instances, name, source))
    print(f"pinned {name}: {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
