#!/bin/sh
# Test worker: valid JSON, wrong answer: a batch answered with one reward too few / a string reward.
while read line; do
  case "$line" in
    *'"batch"'*) echo '{"rewards": [1]}' ;;
    *) echo '{"reward": "high"}' ;;
  esac
done
