#!/bin/bash
# Rebuilds the embedded demo model examples/models/demo/ from nothing: corpus -> BPE tokenizer
# -> training -> export + golden data. Intermediate files go to $WORK (default build/demo/).
# Needs Debian's python3-torch, python3-numpy and python3-jinja2 (renders the chat samples);
# libopenblas0-openmp makes training ~20x faster (29 minutes on a shared, busy 2-core machine;
# hours without it). Deterministic: the same machine and BLAS give byte-identical files.
#
#   tools/make_demo.sh            # all steps
#   OUT=/tmp/demo tools/make_demo.sh   # write the model somewhere else
set -euo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
WORK=${WORK:-build/demo}
OUT=${OUT:-examples/models/demo}
mkdir -p "$WORK"

# Debian's torch links the system libblas.so.3; prefer OpenBLAS when installed, for this
# process only (the system's BLAS alternative is left alone).
for d in /usr/lib/*-linux-gnu/openblas-openmp /usr/lib/*-linux-gnu/openblas-pthread; do
  if [ -e "$d/libblas.so.3" ]; then
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "make_demo: using $d"
    break
  fi
done
case "${LD_LIBRARY_PATH:-}" in
  *openblas*) ;;
  *) echo "make_demo: OpenBLAS not found (apt-get install libopenblas0-openmp); training will be slow" >&2 ;;
esac
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

start=$(date +%s)
"$PY" tools/demo_corpus.py "$WORK/corpus.txt" --chat "$WORK/chat.jsonl"
"$PY" tools/train_bpe.py train "$WORK/corpus.txt" "$WORK/tokenizer" --chat "$WORK/chat.jsonl" --vocab-size 1024
"$PY" tools/train_demo_model.py "$WORK/corpus.txt" "$WORK/tokenizer/tokenizer.json" "$WORK/train.pt" --chat "$WORK/chat.jsonl" \
  --steps 700 --batch 24 --chat-batch 3
"$PY" tools/export_demo.py "$WORK/train.pt" "$WORK/tokenizer" "$OUT"
echo "make_demo: done in $(( $(date +%s) - start )) s -> $OUT"
