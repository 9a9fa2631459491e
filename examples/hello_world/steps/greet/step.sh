#!/bin/bash
set -euo pipefail

echo "Hello, $NAME!"

# Store the greeting for the next step.
curl -fsS -X POST "$MAXQ_API/runs/$MAXQ_RUN_ID/artifacts" \
  -H "Content-Type: application/json" \
  -d "{
    \"stepId\": \"$MAXQ_STEP_ID\",
    \"stepName\": \"$MAXQ_STEP_NAME\",
    \"sequence\": $MAXQ_STEP_SEQUENCE,
    \"name\": \"greeting\",
    \"value\": { \"message\": \"Hello, $NAME!\" }
  }"
