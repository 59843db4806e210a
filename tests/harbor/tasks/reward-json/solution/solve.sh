#!/bin/bash
echo "$ANSWER" > answer.txt
