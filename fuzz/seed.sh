#!/usr/bin/env bash
# Writes every manifest of examples/ (valid and invalid) as a fuzz seed: selector byte + object JSON.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
mkdir -p corpus/admission
python3 - <<'PY'
import glob, json, os, yaml
for path in sorted(glob.glob("../examples/**/*.yaml", recursive=True)):
    for i, doc in enumerate(yaml.safe_load_all(open(path))):
        if not isinstance(doc, dict) or "kind" not in doc:
            continue
        base = 0 if doc["kind"] == "NodeWright" else 2
        for mode in (0, 1):  # mutate, validate
            name = f"{os.path.basename(path)}-{i}-{mode}"
            with open(f"corpus/admission/{name}", "wb") as f:
                f.write(bytes([base + mode]) + json.dumps(doc).encode())
PY
ls corpus/admission | wc -l
