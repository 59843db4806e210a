#!/bin/bash
# The reference solution; it also checks that the tests are not there to read.
if [ -e /tests ]; then echo "solve.sh saw /tests" > /app/leak; fi
# left running on purpose: it must be stopped before the tests are copied in
nohup sh -c 'while true; do [ -e /tests/test.sh ] && echo "a leftover process saw /tests" > /app/leak; sleep 0.1; done' >/dev/null 2>&1 &
echo "hello harbor" > /app/hello.txt
