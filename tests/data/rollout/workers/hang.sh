#!/bin/sh
# Test worker: reads requests and never answers.
exec sleep 600
