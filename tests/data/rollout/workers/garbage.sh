#!/bin/sh
# Test worker: answers every request with something that is not the protocol.
while read line; do echo 'hello there'; done
