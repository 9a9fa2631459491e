#!/bin/bash
set -euo pipefail

# Read the greeting artifact of the greet step.
GREETING=$(curl -fsS "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts?stepName=greet&name=greeting" |
  jq -r '.artifacts[0].value.message')

echo "Previous greeting was: $GREETING"
echo "Goodbye!"
