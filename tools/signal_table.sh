# docs/hpc.md's signal table, read by the tests that exercise its rows (source it). Each row is
#   | `ROW` | you send | to | what happens | checkpoint | ends | `ctest name` |
# and the test of a row calls signal_table_check with what it saw; tests/slurm/signal_table_tests.py
# checks that every row names a test that checks it, and every check names a row.

signal_table_doc=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/docs/hpc.md

# The cell in column $2 (1 = the row id) of row $1, without backticks and outer spaces.
signal_table_cell() {
  awk -F'|' -v row="\`$1\`" -v column="$2" '
    { id = $2; gsub(/^ +| +$/, "", id) }
    id == row { cell = $(column + 1); gsub(/`/, "", cell); gsub(/^ +| +$/, "", cell); print cell; exit }
  ' "$signal_table_doc"
}

# signal_table_check ROW CHECKPOINT ENDS: CHECKPOINT (yes | no) and ENDS (e.g. "exit 3",
# "CANCELLED, no requeue") are what the test saw; exits 1 unless the row says the same: its
# checkpoint cell starts with that word and its ends cell is ENDS.
signal_table_check() {
  local row=$1 checkpoint=$2 ends=$3 said_checkpoint said_ends
  said_checkpoint=$(signal_table_cell "$row" 5)
  said_ends=$(signal_table_cell "$row" 6)
  if [ -z "$said_ends" ]; then
    echo "FAIL: docs/hpc.md's signal table has no row \`$row\`" >&2
    exit 1
  fi
  if [ "${said_checkpoint%%[ ,]*}" != "$checkpoint" ] || [ "$said_ends" != "$ends" ]; then
    echo "FAIL: signal table row \`$row\` says checkpoint \"$said_checkpoint\", ends \"$said_ends\"; the test saw" \
         "checkpoint \"$checkpoint\", ends \"$ends\"" >&2
    exit 1
  fi
  echo "signal table row \`$row\`: checkpoint $checkpoint, ends $ends, as docs/hpc.md says"
}
