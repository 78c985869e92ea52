#!/bin/bash
# Pack Ray for the GPU machine, which has no network (issue 24): Ray's wheel for CPython 3.12
# (manylinux2014, x86-64), unpacked, trimmed of what a petri study never imports (ray/jars, rllib,
# data, serve, tune, train), with the few pure-Python needs the machine's image lacks (jsonschema and
# its own needs; rpds-py as its manylinux wheel), into one xz archive of a site folder.
#
#   bash experiments/pack_ray.sh [DEST]            # default DEST: .whl (ignored by git; name it in carry)
#   # on the device, before Python starts:
#   mkdir -p /tmp/site && tar -xJf .whl/ray-2.60.0-cp312-site.tar.xz -C /tmp/site && export PYTHONPATH=/tmp/site:$PYTHONPATH
#
# Measured here: the wheel is 79 MB; the archive about 30 MB (under the 64 MiB a device call carries).
set -euo pipefail
DEST=${1:-.whl}
VERSION=${RAY_VERSION:-2.60.0}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PIP=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform any -d "$WORK/wheels")
"${PIP[@]}" "ray==$VERSION" jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.30.0
mkdir -p "$WORK/site" "$DEST"
for wheel in "$WORK"/wheels/*.whl; do
  unzip -q -o "$wheel" -d "$WORK/site"  # keeps the executable bits of raylet, gcs_server
done
rm -rf "$WORK"/site/ray/{jars,rllib,data,serve,tune,train}
OUT_FILE="$DEST/ray-$VERSION-cp312-site.tar.xz"
tar -C "$WORK/site" -cf - . | xz -6 -T2 > "$OUT_FILE"
ls -l "$WORK"/wheels/*.whl | awk '{print $5, $9}'
echo "packed: $OUT_FILE ($(du -m "$OUT_FILE" | cut -f1) MB)"
