#!/bin/sh
# Stands in for a rank that takes seconds to start (a large binary and its libraries on a network
# file system): sleeps SLOW_START_SECONDS (default 3), then runs SLOW_START_BIN with the arguments.
# A signal that reaches it while it sleeps kills it, as it kills a rank that has not set its signal
# handlers yet: the launchers hold signals until the ranks take them (jobs/stop_signals.sh).
sleep "${SLOW_START_SECONDS:-3}"
exec "${SLOW_START_BIN:?SLOW_START_BIN names the program to run}" "$@"
