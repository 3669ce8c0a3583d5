#!/bin/sh
# Test worker: answers one request, then exits with status 3.
read line
echo '{"reward": 1}'
exit 3
